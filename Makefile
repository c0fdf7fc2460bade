# The whole set-up is `make demo` or `make test`: each builds .venv from nothing, or reuses it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: install bytecode demo test test-fast worker bench bench-quick histories lint docs reference clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/taskfleet demo

# Test files spread over TEST_WORKERS processes (pytest-xdist), each with its own dev server. The
# suite is CPU-bound on 2 cores: three processes keep both busy, four measured no faster.
# TEST_WORKERS=0: serial.
# Files go out in collection order, where tests/conftest.py puts the `heavy` ones first, a busy one
# and two that mostly wait in turn (xdist's own order, most tests first, would start the longest
# files, which hold few tests, last). `make test` compiles the project's bytecode first.
TEST_WORKERS ?= 3
test: $(STAMP) bytecode
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# The unit tests and one end-to-end path per workflow (the `smoke` marker), for the edit-test loop;
# tests that need the session's dev server or start servers, workers and builds of their own are left
# to `make test`.
test-fast: $(STAMP) bytecode
	$(PY) -m pytest -m "not server and not slow or smoke" $(PYTEST_ARGS)

# The project's own bytecode, written once, as `pip install` writes it for an installed package: an
# editable install has none, and with PYTHONDONTWRITEBYTECODE set every worker and CLI process the
# tests start would compile taskfleet again (0.12-0.18 s of CPU each).
# Only changed files are compiled; Python ignores bytecode older than its source.
bytecode: $(STAMP)
	$(PY) -m compileall -q -j 0 taskfleet activities workflows worker.py tests benchmarks examples

worker: $(STAMP)
	$(PY) worker.py --dev

bench: $(STAMP)
	$(PY) benchmarks/git_batching.py
	$(PY) benchmarks/git_paths.py
	$(PY) benchmarks/dispatch.py
	$(PY) benchmarks/sdk_baseline.py
	$(PY) benchmarks/lessons.py
	$(PY) benchmarks/templates.py
	$(PY) benchmarks/worktrees.py
	$(PY) benchmarks/result_cache.py
	$(PY) benchmarks/cancel.py
	$(PY) benchmarks/llm_batching.py
	$(PY) benchmarks/fleet.py
	$(PY) benchmarks/judge.py
	$(PY) benchmarks/scale.py
	$(PY) benchmarks/lock.py
	$(PY) benchmarks/merge_queue.py
	$(PY) benchmarks/process_trees.py

# Every benchmark at small sizes (seconds each); `make test` runs them too (tests/test_benchmarks.py).
bench-quick: $(STAMP)
	$(PY) benchmarks/cancel.py --quick
	$(PY) benchmarks/dispatch.py --quick
	$(PY) benchmarks/fleet.py --quick
	$(PY) benchmarks/git_batching.py --quick
	$(PY) benchmarks/git_paths.py --quick
	$(PY) benchmarks/judge.py --quick
	$(PY) benchmarks/lessons.py --quick
	$(PY) benchmarks/llm_batching.py --quick
	$(PY) benchmarks/lock.py --quick
	$(PY) benchmarks/merge_queue.py --quick
	$(PY) benchmarks/process_trees.py --quick
	$(PY) benchmarks/result_cache.py --quick
	$(PY) benchmarks/scale.py --quick
	$(PY) benchmarks/sdk_baseline.py --quick
	$(PY) benchmarks/templates.py --quick
	$(PY) benchmarks/worktrees.py --quick

# ruff's rules as pyproject.toml configures them: pycodestyle (E, W), pyflakes (F), import order
# (I), 100 columns. `$(VENV)/bin/ruff check --fix .` puts imports in order.
lint: $(STAMP)
	$(VENV)/bin/ruff check .

# The documentation site (docs/, mkdocs.yml) into site/; --strict: a broken link or anchor fails.
# NO_MKDOCS_2_WARNING silences the theme's end-of-life banner, which is not a build warning.
# The Python API page reads the package as it is installed (`activities/` and `workflows/` inside
# `taskfleet`): a tree of links in that shape, for mkdocstrings.
docs: $(STAMP)
	rm -rf .taskfleet/api && mkdir -p .taskfleet/api/taskfleet
	cp -rs $(CURDIR)/taskfleet/. .taskfleet/api/taskfleet/
	ln -s $(CURDIR)/activities .taskfleet/api/taskfleet/activities
	ln -s $(CURDIR)/workflows .taskfleet/api/taskfleet/workflows
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# The reference pages generated from the code (tests/test_reference.py fails when they are stale).
reference: $(STAMP)
	$(PY) tests/reference_docs.py

histories: $(STAMP)
	TASKFLEET_RECORD_HISTORIES=1 $(PY) -m pytest -k 'not replay'

clean:
	rm -rf $(VENV) .taskfleet .pytest_cache site
