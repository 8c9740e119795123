# Every target installs the project into .venv first, so any of them works as the first command on a
# fresh clone. Only Python 3.11, g++, make and perl are assumed; the rest comes from PyPI, at the exact
# versions of requirements/ci.lock (pyproject.toml keeps compatible ranges for users' environments). The
# train extra (CPU PyTorch, scikit-learn) is installed too, so the reduced training test runs in make test.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PIP    := $(VENV)/bin/pip install --disable-pip-version-check -q --no-compile -c requirements/ci.lock
# Two workers on two cores; RTL builds are cached and shared read-only between them (sim/verilator/runner.py).
# Tests are handed out one at a time, in tests/conftest.py's order (the RTL tests first).
PYTEST_WORKERS ?= 2
XDIST := -n $(PYTEST_WORKERS) --maxschedchunk 1
# Bytecode is compiled when first imported (pip's --no-compile: compiling every file of PyTorch and the rest
# at install time took half of a fresh clone's install) and then kept, even where the environment says not
# to (PYTHONDONTWRITEBYTECODE): every test worker, cocotb simulation and CLI subprocess imports the package
# and the tests, and compiling them again in each costs seconds per process.
export PYTHONDONTWRITEBYTECODE :=
PYTEST := $(PY) -m pytest
BOARD ?= ecpix5_85

.PHONY: install test test-all sim verilog synth bitstream bitstream-uart bitstream-eth bench prove demo demo-faults demo-root \
	demo-net train lint lock clean figures figures-check

install: $(STAMP)

$(STAMP): pyproject.toml requirements/ci.lock
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --disable-pip-version-check -q --upgrade pip
	$(PIP) -e '.[dev,synth,train]'
	touch $@

# The suite CI runs: lint, then every test not marked slow (the volume checks live in `make test-all`).
test: $(STAMP) lint
	$(PYTEST) $(XDIST) -m "not slow" --durations=10 tests

# Everything, the slow volume tests included.
test-all: $(STAMP) lint
	$(PYTEST) $(XDIST) --durations=10 tests

sim: $(STAMP)
	$(PYTEST) $(XDIST) -m "rtl and not slow" tests

verilog: $(STAMP)
	$(VENV)/bin/wanreduce verilog -o build/verilog --force

# Whole-core synthesis (ECP5 W=64 place and route, UltraScale+ W=512 estimate) and build/synth.md.
synth: $(STAMP)
	$(VENV)/bin/wanreduce synth all

# The Ethernet tops (docs/board.md): the ECPIX-5's, the core on its network port, and the ECP5 Versa's,
# two ports in line; each to build/synth/eth_<board>/ with its per-clock Fmax in result.json.
bitstream: $(STAMP)
	$(VENV)/bin/wanreduce synth eth --board ecpix5_85
	$(VENV)/bin/wanreduce synth eth --board versa_ecp5

# One board's Ethernet top: make bitstream-eth BOARD=versa_ecp5.
bitstream-eth: $(STAMP)
	$(VENV)/bin/wanreduce synth eth --board $(BOARD)

# The UART-only board top (hw/board.py; seeds tried until one meets its clock): build/synth/bitstream_<board>/.
bitstream-uart: $(STAMP)
	$(VENV)/bin/wanreduce synth bitstream --board $(BOARD)

# The SymbiYosys proofs of the slot table (sim/verify/formal.py); the depth reached per property goes to
# build/prove.json.
prove: $(STAMP)
	$(VENV)/bin/wanreduce prove --report build/prove.json --force

bench: $(STAMP)
	$(VENV)/bin/wanreduce bench $(if $(BENCH),--only $(BENCH))

demo: $(STAMP)
	$(VENV)/bin/wanreduce demo -o build/demo.json --force

demo-faults: $(STAMP)
	$(VENV)/bin/wanreduce demo --loss 0.01 --dup 0.01 --reorder --corrupt 0.001 -o build/demo_faults.json --force

demo-root: $(STAMP)
	$(VENV)/bin/wanreduce demo --mode root --memory 256KiB -o build/demo_root.json --force

# Nine aggregator processes and nine host processes over real UDP multicast on loopback, the WAN emulated.
demo-net: $(STAMP)
	$(VENV)/bin/wanreduce demo-net

train: $(STAMP)
	$(VENV)/bin/wanreduce train --force

# The figures README.md and docs/*.md quote (docs/figures.json, docs/figures.md): rerun the stale ones and
# render the generated regions; the check exits 0 only if every quoted figure and region is current.
figures: $(STAMP)
	$(VENV)/bin/wanreduce figures refresh

figures-check: $(STAMP)
	$(VENV)/bin/wanreduce figures check

lint: $(STAMP)
	$(VENV)/bin/ruff check spec hw host sim cli tests
	$(VENV)/bin/ruff format --check spec hw host sim cli tests

lock: $(STAMP)
	$(PY) requirements/freeze.py > requirements/ci.lock

clean:
	rm -rf build sim_build .pytest_cache
	-$(VENV)/bin/wanreduce cache --clear
