# SMD Lab developer entry points.  Quick start:  make run   /   make test
#
# The virtual environment lives in .venv.  torch is pinned and installed *before* the project:
# an unpinned `pip install torch` resolves to the multi-GB CUDA build, while torch==$(TORCH_VERSION)
# is picked from the local find-links wheel directory (CPU build) where pip is configured with one.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:

PYTHON        ?= python3
VENV          ?= .venv
TORCH_VERSION ?= 2.13.0
# Extra pip arguments for the torch install only, e.g.
#   make test TORCH_PIP_ARGS='--index-url https://download.pytorch.org/whl/cpu'
TORCH_PIP_ARGS ?=
PYTEST_ARGS   ?=
BENCHES       ?= $(wildcard bench/*.py)

VPY   := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: help venv run test test-quick test-paper test-kernels lint redis postgres chromium faketime bench clean

help:
	@echo "make run    - start the service (API + embedded worker, SQLite, auth off) on 127.0.0.1:\$${SMD_PORT:-8000}"
	@echo "make test   - run the test suite (PYTEST_ARGS='...' to pass options to pytest)"
	@echo "make test-quick - engine, store and API unit tests on SQLite: no servers, no browser (< 3 min)"
	@echo "make test-paper - the seeds' figures at the papers' own sizes (minutes each; make test runs them sized down)"
	@echo "make test-kernels - the Triton kernels of the GPU path on the CPU (TRITON_INTERPRET=1; installs triton)"
	@echo "make lint   - ruff and mypy (also run by make test, before pytest)"
	@echo "make bench  - run the benchmarks in bench/"
	@echo "make clean  - remove .venv and build/test caches (keeps .smd/ data)"

venv: $(STAMP)

$(STAMP): pyproject.toml
	@if [ ! -x "$(VPY)" ]; then \
	    echo ">> creating $(VENV)"; \
	    $(PYTHON) -m venv "$(VENV)" || { \
	        echo "error: '$(PYTHON) -m venv' failed; on Debian/Ubuntu install python3-venv" >&2; \
	        rm -rf "$(VENV)"; exit 1; }; \
	fi
	@echo ">> installing torch==$(TORCH_VERSION) (pinned, before the project)"
	$(VPY) -m pip install --quiet $(TORCH_PIP_ARGS) "torch==$(TORCH_VERSION)"
	@echo ">> installing the project (editable) with test extras"
	$(VPY) -m pip install --quiet -e '.[test]'
	@$(VPY) -c 'import torch, sys; v = torch.__version__.split("+")[0]; \
	    sys.exit(0 if v == "$(TORCH_VERSION)" else "error: torch " + torch.__version__ + " installed, expected $(TORCH_VERSION)")'
	@touch "$@"

run: venv
	SMD_AUTH=$${SMD_AUTH:-off} $(VENV)/bin/smd serve

redis:
	@./scripts/ensure-redis.sh

# Order-only after `redis`: under `make -j` the two apt-get installs (and their policy-rc.d) must
# not overlap, and the package index that ensure-redis fetched is then reused.
postgres: | redis
	@./scripts/ensure-postgres.sh

# the dashboard's browser tests drive the Debian chromium package (after postgres: one apt-get at a time)
chromium: | postgres
	@./scripts/ensure-chromium.sh

# libfaketime, for the clock-skew test (tests/integration/test_clock_skew.py; after chromium: one apt-get at a time).
# Not fatal: without it that one test is skipped, saying why.
faketime: | chromium
	@./scripts/ensure-faketime.sh || echo "make: no faketime: tests/integration/test_clock_skew.py will be skipped" >&2

# ruff (pyflakes, isort, bugbear, pyupgrade) and mypy (smdengine, store): configured in pyproject.toml
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# Two pytest processes (pytest-xdist): every module goes whole to either; the fault scenarios whose timings
# matter run one after another in one of them (tests/conftest.py, SERIAL_MODULES). Lint and the schema fuzzing
# run beside them at nice 19, in the CPU the main session leaves idle (scripts/run-tests.sh says why).
# PYTEST_ARGS='...' runs lint, then just that selection (in the same two processes); PYTEST_WORKERS=0 runs one
# process. --durations=15: the slowest tests are printed at the end of every run, so that growth shows.
PYTEST_WORKERS ?= 2
XDIST          = -n $(PYTEST_WORKERS) --dist loadfile

test: venv redis postgres chromium faketime
ifeq ($(strip $(PYTEST_ARGS)),)
	./scripts/run-tests.sh $(VENV) $(PYTEST_WORKERS)
else
	$(VENV)/bin/ruff check . && $(VENV)/bin/mypy
	$(VPY) -m pytest -q $(XDIST) --durations=15 -m "not paper" $(PYTEST_ARGS)
endif

# The seeds' figures at the papers' own sizes (tests marked `paper`): what make test checks sized down from its
# tolerance, checked at full size (~3 min of CPU per test). Before a change to a simulator's step.
test-paper: venv
	$(VPY) -m pytest -q $(XDIST) --durations=10 -m paper $(PYTEST_ARGS)

# The inner loop: no Redis, PostgreSQL, browser or service processes, no slow statistical runs.
QUICK_PATHS ?= tests/engine tests/store tests/worker tests/api
test-quick: venv
	SMD_TEST_DATABASES=sqlite $(VPY) -m pytest -q $(XDIST) --durations=10 -m "not integration and not slow" \
	    $(QUICK_PATHS) $(PYTEST_ARGS)

# The GPU path's Triton kernels checked without a GPU, in Triton's interpreter (Triton is no dependency:
# CI has no GPU; this installs the version the GPU machines have).
TRITON_VERSION ?= 3.6.0
test-kernels: venv
	$(VPY) -c "import triton" 2>/dev/null || $(VPY) -m pip install -q "triton==$(TRITON_VERSION)"
	TRITON_INTERPRET=1 $(VPY) -m pytest -q $(XDIST) tests/engine/test_noise_stream.py tests/engine/test_multistep.py \
	    tests/engine/test_fused_step.py \
	    $(PYTEST_ARGS)

bench: venv
	@if [ -z "$(strip $(BENCHES))" ]; then echo "no benchmarks in bench/"; exit 0; fi; \
	for b in $(BENCHES); do echo ">> $$b"; $(VPY) "$$b"; done

clean:
	rm -rf "$(VENV)" build dist .pytest_cache *.egg-info
	find . -path ./.git -prune -o -type d -name __pycache__ -prune -exec rm -rf {} +
