"""What a model is shown of a repository: the base commit, its file list and the files a board names
by glob, read from the commit (never a checkout), within size caps."""

from __future__ import annotations

import fnmatch

from git import Repo
from git.exc import GitCommandError


class RepoReadError(ValueError):
    """A base, glob or size the request cannot be built from; the message says which."""


def base_commit(repo: Repo, base: str, remote: str) -> str:
    """The clone's local base branch, else its remote-tracking branch (taskfleet never fetches)."""
    for ref in (f"refs/heads/{base}", f"refs/remotes/{remote}/{base}"):
        try:
            return repo.git.rev_parse("--verify", "--quiet", f"{ref}^{{commit}}")
        except GitCommandError:
            continue
    raise RepoReadError(f"base branch {base} does not exist in {repo.working_dir}")


def file_names(repo: Repo, commit: str) -> list[str]:
    return [n for n in repo.git.ls_tree("-r", "--name-only", "-z", commit).split("\0") if n]


def listed(names: list[str], max_names: int, max_chars: int) -> list[str]:
    """The first names of the list, within both caps (the prompt says how many were left out)."""
    out, size = [], 0
    for name in names[:max_names]:
        size += len(name) + 1
        if size > max_chars:
            break
        out.append(name)
    return out


def context_files(repo: Repo, commit: str, globs: list[str], max_bytes: int, base: str,
                  names: list[str] | None = None) -> list[tuple[str, str]]:
    """The files the globs match at `commit`, each once, in glob order; every glob must match, and
    all of them together stay under `max_bytes` (the error names the largest)."""
    if not globs:
        return []
    names = file_names(repo, commit) if names is None else names
    chosen: list[str] = []
    for glob in globs:
        matched = [n for n in names if fnmatch.fnmatchcase(n, glob)]
        if not matched:
            raise RepoReadError(f"context glob {glob!r} matches no file at {base}")
        chosen.extend(n for n in matched if n not in chosen)
    sizes = {n: int(repo.git.cat_file("-s", f"{commit}:{n}")) for n in chosen}
    total = sum(sizes.values())
    if total > max_bytes:
        largest = sorted(sizes.items(), key=lambda kv: -kv[1])[:5]
        raise RepoReadError(f"context files total {total} bytes, over the cap of {max_bytes} "
                            "(TASKFLEET_LLM_CONTEXT_MAX_BYTES); largest: "
                            + ", ".join(f"{n} ({s} bytes)" for n, s in largest))
    return [(n, repo.git.show(f"{commit}:{n}", strip_newline_in_stdout=False)) for n in chosen]
