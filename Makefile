# `make test` and `make demo` work on a fresh machine: they create .venv when missing.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test demo bench lint clean

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

demo: $(STAMP)
	$(PY) examples/supervision_demo.py
	$(PY) examples/store_recovery_demo.py
	$(PY) examples/memory_policy_demo.py
	$(PY) examples/agents_demo.py

bench: $(STAMP)
	$(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) build *.egg-info
