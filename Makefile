# `make test` and `make demo` work on a fresh machine: they create .venv when missing.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test demo examples bench lint clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check otpmem tests examples benchmarks
	$(VENV)/bin/mypy otpmem

# The observer's browser test (tests/test_observe_browser.py) drives Debian's chromium.
CHROMIUM := /usr/bin/chromium

$(CHROMIUM):
	@command -v apt-get >/dev/null || { echo "the browser test needs chromium at $(CHROMIUM)"; exit 1; }
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null

# Two workers (pytest-xdist): the suite is mostly CPU-bound Python, and a 2-core box runs
# it in about half the time; each worker has its own embedded PostgreSQL.
test: lint $(CHROMIUM)
	$(PY) -m pytest -q -n 2

# The main job: 20 agents x 10 turns under chaos into a temporary directory; the first run
# SIGKILLs itself mid-way (a crash drill), the second recovers and audits every
# acknowledged message against the ledger. Exits non-zero if anything was lost.
demo: $(STAMP)
	@dir=$$(mktemp -d -t otpmem-demo-XXXXXX); \
	echo "== run 1: 20 agents x 10 turns, chaos 0.1; the process kills itself (SIGKILL) after 120 turns"; \
	$(VENV)/bin/otpmem simulate --agents 20 --turns 10 --chaos 0.1 --seed 1 --data $$dir --kill-self-after 120 --no-progress; \
	echo "== run 1 ended with status $$? (137: killed by SIGKILL, as planned)"; \
	echo "== run 2: recovery in the same directory (the run's parameters are in its run.json): finish the turns, then audit everything"; \
	$(VENV)/bin/otpmem simulate --data $$dir --resume; \
	status=$$?; rm -rf $$dir; exit $$status

# Every example in examples/, each in a scratch directory (tests/test_examples.py checks that
# this list names them all): the one-layer demos, the multi-agent simulation, the embedded
# service fed two requests on stdin (end of input stops it), the SIGKILL-and-recover pair,
# and the fault-injection suite under pytest.
EXAMPLES := supervision_demo store_recovery_demo memory_policy_demo agents_demo \
            multi_agent_simulation recall_demo shared_postgres long_term_memory_demo \
            fastapi_app team_blocks_demo
examples: $(STAMP)
	@set -e; root=$$(pwd); dir=$$(mktemp -d -t otpmem-examples-XXXXXX); trap 'rm -rf "$$dir"' EXIT; \
	cd "$$dir"; \
	for example in $(EXAMPLES); do \
		echo "== examples/$$example.py"; $(abspath $(PY)) $$root/examples/$$example.py; \
	done; \
	echo "== examples/embedded_service.py (two requests on stdin)"; \
	printf 'alice: 2+3\nstats\n' | $(abspath $(PY)) $$root/examples/embedded_service.py "$$dir/service"; \
	echo "== examples/restart_recovery.py, run 1 (kills itself with SIGKILL)"; \
	status=0; $(abspath $(PY)) $$root/examples/restart_recovery.py "$$dir/recovery" || status=$$?; \
	test $$status -eq 137 || { echo "expected status 137 (SIGKILL), got $$status"; exit 1; }; \
	echo "== examples/restart_recovery.py, run 2 (recovers and checks)"; \
	$(abspath $(PY)) $$root/examples/restart_recovery.py "$$dir/recovery"; \
	echo "== examples/fault_injection (pytest)"; \
	cd "$$root" && $(PY) -m pytest -q -p no:cacheprovider examples/fault_injection

bench: $(STAMP)
	$(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) build *.egg-info
