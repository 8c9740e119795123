# Every target installs the project into .venv first, so any of them works as the first command on a
# fresh clone. Only Python 3.11, g++, make and perl are assumed; the rest comes from PyPI.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Two workers on two cores; RTL builds are cached and shared read-only between them (wanreduce.sim.runner).
PYTEST_WORKERS ?= 2

.PHONY: install test sim verilog bench demo lint clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --disable-pip-version-check -q --upgrade pip
	$(VENV)/bin/pip install --disable-pip-version-check -q -e '.[dev,synth]'
	touch $@

test: $(STAMP)
	$(PY) -m pytest -n $(PYTEST_WORKERS) -m "not slow" --durations=10 tests

sim: $(STAMP)
	$(PY) -m pytest -n $(PYTEST_WORKERS) -m "rtl and not slow" tests

verilog: $(STAMP)
	$(PY) -m wanreduce.sim.verilog --out build/verilog

bench: $(STAMP)
	$(PY) -m wanreduce.sim.bench --out build/bench.json $(if $(BENCH),--only $(BENCH))

demo: $(STAMP)
	$(VENV)/bin/wanreduce demo

lint: $(STAMP)
	$(VENV)/bin/ruff check hw host sim tests

clean:
	rm -rf build sim_build .pytest_cache
