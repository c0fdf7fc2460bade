"""What a merge queue has in flight and what each verify result means: plain decisions, no awaits.

The train (after Zuul's dependent pipeline): batches in landing order, each merged onto the one
ahead and verified at the same time; green ones land in order, several with one push. A red batch
leaves the train at once: the batches stacked on it are rebuilt without it, and its entries are
isolated apart (after bors-ng's bisection, in parallel): split into as many parts as there are free
verify slots, each part stacked on the parts before it. A green part's entries rejoin the queue at
their place; the first red part is split again, down to one entry, which is verified again on the
same merge before it is a culprit (a flake is not). The run loop (`Speculation`, `steps.py`)
runs the activities and hands their results to `Train`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Optional

from temporalio import workflow

from taskfleet.workflows.merge_queue.intake import verify_of

with workflow.unsafe.imports_passed_through():
    from taskfleet.core.bounded import clip
    from taskfleet.core.models.merge_queue import (
        ENTRY_CONFLICT,
        ENTRY_LANDED,
        ENTRY_REJECTED,
        LANE_CONFIRM,
        LANE_ISOLATE,
        LANE_TRAIN,
        MERGE_CONFLICT,
        MERGE_IN_TARGET,
        MERGE_MERGED,
        STAGE_CONFIRMING,
        STAGE_GREEN,
        STAGE_RED,
        STAGE_VERIFYING,
        STAGE_WAITING,
        BuildOutput,
        HeldEntry,
        MergeQueueConfig,
        MergeQueueState,
        PushOutput,
        QueueBatch,
        QueueEntry,
        VerifyOutput,
    )

TRAIL = 20  # verify runs and splits remembered per entry
FATES = 50  # decided entries the culprit rate is measured over
FATES_FLOOR = 20  # ... counted as at least this many: one early culprit does not halve the window
CULPRIT_FILES = 200
FLAKE_TARGET = 1e-3  # a good entry is rejected by flakes at most this often
MAX_EXTRA_RUNS = 4


class Train:
    """Batches in flight and the queue they come from (state through the constructor: the
    workflow's `MergeQueueState`); `decide` answers an entry, `flaky` records a flake's lesson."""

    def __init__(self, s: MergeQueueState, config: MergeQueueConfig, decide: Callable[..., object],
                 flaky: Callable[[list[QueueEntry], QueueBatch], None],
                 busy: Callable[[], int]) -> None:
        self.s, self.config, self.decide, self.flaky, self.busy = s, config, decide, flaky, busy

    # --- what is in flight -----------------------------------------------------------------------

    def live(self) -> dict[str, QueueBatch]:
        return {b.id: b for b in self.s.batches}

    def lane(self, name: str) -> list[QueueBatch]:
        return [b for b in self.s.batches if b.lane == name]

    def below(self, b: QueueBatch) -> list[QueueBatch]:
        """The batches `b` is stacked on, nearest first (a batch no longer in flight has landed)."""
        live, out = self.live(), []
        on = live.get(b.stacked_on)
        while on is not None:
            out.append(on)
            on = live.get(on.stacked_on)
        return out

    def chain_ok(self, b: QueueBatch) -> bool:
        return all(x.stage == STAGE_GREEN for x in self.below(b))

    def base_of(self, b: QueueBatch) -> Optional[str]:
        """The commit to merge `b` onto ("": the tip), or None until the one below is merged."""
        on = self.live().get(b.stacked_on)
        if on is None:
            return ""
        return on.merged_commit or None

    # --- the queue side --------------------------------------------------------------------------

    def culprit_rate(self) -> float:
        fates = self.s.fates[-FATES:]
        return sum(fates) / max(len(fates), FATES_FLOOR)

    def window(self) -> int:
        """The largest batch more likely green than red at the recent culprit rate (a red batch
        whose culprit was found does not shrink it: only culprits count)."""
        rate = self.culprit_rate()
        if rate <= 0:
            return self.config.max_batch
        fits = int(math.log(0.5) / math.log(1 - rate)) if rate < 1 else 1
        return max(1, min(self.config.max_batch, fits))

    def red_runs_needed(self) -> int:
        """Red runs of one merge that make a culprit: 1 + flake_retries, more while the suite has
        been flaky lately, so that a good entry is rejected at most once in 1/FLAKE_TARGET."""
        needed = 1 + self.config.flake_retries
        st = self.s.stats
        if st.flaky_runs and st.verify_runs:
            rate = min(0.5, st.flaky_runs / st.verify_runs)
            runs = math.ceil(math.log(FLAKE_TARGET) / math.log(rate))
            needed = max(needed, min(1 + MAX_EXTRA_RUNS, runs))
        return needed

    def reds_to_reject(self, b: QueueBatch) -> int:
        """An entry that already passed apart needs one red run more: its green run speaks for
        it."""
        return self.red_runs_needed() + any(e.passed_alone for e in b.entries)

    def requeue(self, entries: list[QueueEntry]) -> None:
        """Entries back to the queue at their place; due at once (they waited already)."""
        if entries:
            self.s.queue = sorted(self.s.queue + entries, key=lambda e: e.seq)
            self.s.flush_requested = True

    def risky(self, entry: QueueEntry) -> bool:
        """Likely to break the verify (taskfleet's signals, or a path a recent culprit changed), and
        not yet verified on its own."""
        files = set(self.s.culprit_files)
        return not entry.passed_alone and (entry.risk > 0 or any(f in files for f in entry.files))

    def verify_of(self, entry: QueueEntry) -> str:
        return verify_of(entry, self.config)

    def cut(self, free: int) -> QueueBatch:
        """The next batch from the head of the queue, in order: the entries sharing the head's
        verify command, a full window or what is due spread over the free slots (a short queue is
        verified in parallel parts, not in one batch), up to a risky entry. A risky entry at the
        head is verified alone first, beside the train: a culprit then takes no batch down."""
        window = self.window()
        self.s.stats.window = self.s.window = window
        train = self.lane(LANE_TRAIN)
        tail = train[-1].id if train else ""
        head = self.s.queue[0]
        verify = self.verify_of(head)
        if self.risky(head):
            self.s.queue.pop(0)
            self.s.flush_requested = bool(self.s.queue) and self.s.flush_requested
            return self.add([head], verify, LANE_ISOLATE, tail)
        # Entries verified green apart share a batch only with each other: a culprit among
        # untested entries would take them down (and apart) again.
        proven = head.passed_alone

        def fits(e: QueueEntry) -> bool:
            return self.verify_of(e) == verify and e.passed_alone == proven

        same = sum(1 for e in self.s.queue if fits(e))
        spread = same < window and not proven  # proven ones are likely green: no need to split them
        cap = max(1, math.ceil(same / max(1, free))) if spread else window
        taken: list[QueueEntry] = []
        kept: list[QueueEntry] = []
        for entry in self.s.queue:
            if not fits(entry) or kept and fits(kept[-1]):
                kept.append(entry)
            elif len(taken) < cap and not self.risky(entry):
                taken.append(entry)
            else:
                kept.append(entry)
        self.s.queue = kept
        if not kept:
            self.s.flush_requested = False
        return self.add(taken, verify, LANE_TRAIN, tail)

    def add(self, entries: list[QueueEntry], verify: str, lane: str, on: str, part_of: str = "",
            at: Optional[int] = None) -> QueueBatch:
        batch = QueueBatch(id=f"batch-{self.s.next_batch}", entries=entries, verify=verify,
                           half_of=part_of, started_at=workflow.now().isoformat(), lane=lane,
                           stacked_on=on, stage=STAGE_WAITING)
        self.s.next_batch += 1
        self.s.batches.insert(len(self.s.batches) if at is None else at, batch)
        return batch

    # --- results ---------------------------------------------------------------------------------

    def built(self, b: QueueBatch, out: BuildOutput) -> None:
        """Entries that cannot merge are answered (or held until the batch lands); a batch left
        empty is passed over."""
        b.base_tip, b.merged_commit = out.base or out.tip, out.head
        if b.base_tip == out.tip:  # fetched fresh (a stacked batch reads the last one fetched)
            self.s.target_tip = out.tip
        fates = {m.entry_id: m for m in out.merges}
        merged = []
        for entry in b.entries:
            fate = fates.get(entry.id)
            if fate is not None and fate.status == MERGE_MERGED:
                merged.append(entry)
            elif fate is not None and fate.status == MERGE_IN_TARGET:
                self.decide(entry, ENTRY_LANDED, fate.reason, commit=out.tip, batch_id=b.id)
            elif fate is not None and fate.status == MERGE_CONFLICT and fate.with_batch:
                b.held.append(HeldEntry(entry, fate.reason, fate.files))
            elif fate is not None and fate.status == MERGE_CONFLICT:
                self.decide(entry, ENTRY_CONFLICT, fate.reason, commit=out.tip, batch_id=b.id,
                            files=fate.files)
            else:  # its branch is missing or moved: the sender's to fix, not a lesson
                reason = fate.reason if fate is not None else "the merge step reported nothing"
                self.decide(entry, ENTRY_REJECTED, reason, commit=out.tip, batch_id=b.id,
                            lesson=False)
        b.entries = merged
        if not merged:
            self.remove(b, requeue=True)

    def verified(self, b: QueueBatch, out: VerifyOutput, run_id: str) -> None:
        self.count(b, out, run_id)
        if out.passed:
            b.stage = STAGE_GREEN
            return
        b.stage = STAGE_RED
        b.reds += 1
        if b.lane == LANE_TRAIN and any(x.stage == STAGE_GREEN for x in self.above(b)):
            self.flake(b)  # a batch stacked on it (its merge included) passed already
        elif b.lane == LANE_TRAIN:  # it leaves the train now; the batches stacked on it are rebuilt
            self.dissolve_above(b)
            self.red(b, finishing=True)
        self.settle()

    def above(self, b: QueueBatch) -> list[QueueBatch]:
        return [x for x in self.s.batches if b in self.below(x)]

    def flake(self, b: QueueBatch) -> None:
        """A red run that a merge including it passed: a flake, counted and recorded."""
        self.s.stats.flaky_runs += 1
        self.flaky(b.entries, b)
        b.stage = STAGE_GREEN

    def confirmed(self, b: QueueBatch, out: VerifyOutput, run_id: str) -> None:
        b.runs -= 1
        self.s.stats.confirm_runs += 1
        self.count(b, out, run_id)
        if out.passed:  # red before, green now on the same merge: a flake
            self.s.stats.flaky_runs += b.reds
            self.flaky(b.entries, b)
            b.stage = STAGE_GREEN
            if not self.join_train(b):
                self.remove(b, requeue=True)
            return
        b.reds += 1
        self.settle()

    def count(self, b: QueueBatch, out: VerifyOutput, run_id: str) -> None:
        st = self.s.stats
        st.verify_runs += 1
        st.batches += 1
        st.verify_seconds = round(st.verify_seconds + out.seconds, 3)
        for entry in b.entries:
            entry.verified_in = (entry.verified_in + [run_id])[-TRAIL:]
        if not out.passed:  # how it ended, then the end of its output
            what = "timed out" if out.timed_out else f"exited with {out.exit_code}"
            b.red_tail = f"{what}\n{out.output_tail}" if out.output_tail else what

    def red(self, b: QueueBatch, finishing: bool = False) -> None:
        """A red batch, its chain green (or speculated so): confirm a single entry, split more."""
        self.requeue([h.entry for h in b.held])
        b.held = []
        if len(b.entries) == 1:
            b.lane, b.stage = LANE_CONFIRM, STAGE_CONFIRMING
            return
        self.s.stats.bisection_steps += 1
        free = self.config.parallel - self.busy() + finishing  # the run that said red is ending
        count = max(2, min(len(b.entries), free))
        size = math.ceil(len(b.entries) / count)
        at = self.s.batches.index(b)
        self.s.batches.remove(b)
        part = None
        for start in range(0, len(b.entries), size):
            chunk = b.entries[start:start + size]
            for entry in chunk:
                entry.split_in = (entry.split_in + [b.id])[-TRAIL:]
            on = part.id if part else b.stacked_on
            part = self.add(chunk, b.verify, LANE_ISOLATE, on, b.id, at)
            at += 1
        part.last_part, part.red_tail = True, b.red_tail

    def settle(self) -> None:
        """Decide every isolated part and confirmation whose chain below is now known green."""
        changed = True
        while changed:
            changed = False
            for b in list(self.s.batches):
                if b.id not in self.live() or not self.chain_ok(b):
                    continue
                if b.lane == LANE_ISOLATE and b.stage == STAGE_GREEN:
                    for entry in b.entries:
                        entry.passed_alone = True
                    if b.last_part:  # every part of a red batch passed: its red run was a flake
                        self.flake(b)
                    if not self.join_train(b):
                        self.remove(b, requeue=True)
                    changed = True
                elif b.lane == LANE_ISOLATE and b.stage == STAGE_RED:
                    above = [x.stage for x in self.above(b) if x.lane == LANE_ISOLATE]
                    if STAGE_GREEN in above:  # a part stacked on it passed: its red was a flake
                        self.flake(b)
                    elif self.s.stats.flaky_runs and any(stage != STAGE_RED for stage in above):
                        continue  # the suite flakes: a part stacked on it may still tell
                    else:
                        self.dissolve_above(b)
                        self.red(b)
                    changed = True
                elif b.lane == LANE_CONFIRM and b.reds >= self.reds_to_reject(b):
                    self.culprit(b)
                    changed = True

    def join_train(self, b: QueueBatch) -> bool:
        """A green batch beside the train joins it when stacked on the train's tail (or on the tip,
        the train empty): it lands as verified, no run again. Else its entries rejoin the queue."""
        train = self.lane(LANE_TRAIN)
        if train and b.stacked_on != train[-1].id:
            return False
        if not train and (b.stacked_on in self.live() or b.base_tip != self.s.target_tip):
            return False
        b.lane = LANE_TRAIN
        self.s.batches.remove(b)
        self.s.batches.append(b)
        return True

    def culprit(self, b: QueueBatch) -> None:
        [entry] = b.entries
        where = f"{self.config.target} at {b.base_tip[:12]}" if b.base_tip else self.config.target
        what, _, tail = b.red_tail.partition("\n")
        self.decide(entry, ENTRY_REJECTED,
                    f"verify `{clip(b.verify, 200)}` {what}, red {b.reds} times on {entry.branch} "
                    f"merged onto {where} ({b.id}, the same merge each time)",
                    commit=b.base_tip, batch_id=b.id, output_tail=tail)
        self.s.fates = (self.s.fates + [1])[-FATES:]
        self.s.culprit_files = (self.s.culprit_files + entry.files)[-CULPRIT_FILES:]
        self.s.stats.culprit_rate = round(self.culprit_rate(), 3)
        self.remove(b)

    # --- the train lands -------------------------------------------------------------------------

    def landable(self) -> list[QueueBatch]:
        """The green batches at the head of the train: one push lands them all."""
        out = []
        for b in self.lane(LANE_TRAIN):
            if b.stage != STAGE_GREEN:
                break
            out.append(b)
        return out

    def landed(self, prefix: list[QueueBatch], pushed: PushOutput) -> None:
        self.s.stats.pushes += 1
        self.s.target_tip = pushed.tip
        last = prefix[-1]
        for b in prefix:
            for entry in b.entries:
                self.decide(entry, ENTRY_LANDED, f"landed with {last.id}", commit=pushed.tip,
                            batch_id=b.id, pushed_in=last.id)
            self.s.fates = (self.s.fates + [0] * len(b.entries))[-FATES:]
            for held in b.held:  # it conflicts with what landed ahead of it: redo it on the new tip
                self.decide(held.entry, ENTRY_CONFLICT, held.reason, commit=pushed.tip,
                            batch_id=b.id, files=held.files)
            b.held = []
            self.remove(b)
        self.s.stats.culprit_rate = round(self.culprit_rate(), 3)

    def moved(self, tip: str) -> None:
        """The target moved under the train (someone pushed): all is rebuilt on the new tip."""
        self.s.stats.rebuilds += 1
        self.s.target_tip = tip
        self.fold()

    # --- taking batches apart --------------------------------------------------------------------

    def remove(self, b: QueueBatch, requeue: bool = False) -> None:
        """`b` leaves; what was stacked on it now stands on what `b` stood on."""
        if b.id not in self.live():
            return
        self.s.batches.remove(b)
        for other in self.s.batches:
            if other.stacked_on == b.id:
                other.stacked_on = b.stacked_on
        if requeue:
            self.requeue(b.entries + [h.entry for h in b.held])

    def dissolve_above(self, x: QueueBatch, apart: bool = True) -> None:
        """Every batch stacked (directly or not) on `x` leaves. A train batch's entries go back to
        the queue; entries already taken apart stay apart, verified again on what `x` stands on (a
        culprit among them never re-enters the train to take it down again)."""
        doomed = [b for b in self.s.batches if x in self.below(b)]
        kept: dict[str, list[QueueEntry]] = {}
        for b in doomed:
            self.s.stats.cancelled_runs += b.runs + (b.stage == STAGE_VERIFYING)
            self.s.batches.remove(b)
            self.requeue([h.entry for h in b.held])
            if apart and b.lane != LANE_TRAIN:
                kept.setdefault(b.verify, []).extend(b.entries)
            else:
                self.requeue(b.entries)
        for verify, entries in kept.items():
            self.add(sorted(entries, key=lambda e: e.seq), verify, LANE_ISOLATE, x.stacked_on, x.id)

    def dissolve(self, x: QueueBatch, apart: bool = True) -> None:
        self.dissolve_above(x, apart)
        self.s.batches.remove(x)
        self.requeue(x.entries + [h.entry for h in x.held])

    def fold(self) -> None:
        """Everything in flight back to the queue (continue-as-new, a moved target)."""
        for b in list(self.s.batches):
            if b.id in self.live():
                self.dissolve(b, apart=False)
