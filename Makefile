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

test: lint
	$(PY) -m pytest -q

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

examples: $(STAMP)
	$(PY) examples/supervision_demo.py
	$(PY) examples/store_recovery_demo.py
	$(PY) examples/memory_policy_demo.py
	$(PY) examples/agents_demo.py

bench: $(STAMP)
	$(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) build *.egg-info
