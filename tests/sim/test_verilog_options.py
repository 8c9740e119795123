"""The export's build options reach the gateware they name (no conversion: the components are only built)."""

import pytest

from wanreduce.sim.synth import verilog


@pytest.mark.parametrize("mod_stages", [4, 16])
def test_mod_stages_reaches_the_schedule_table(mod_stages):
    core = verilog.build(kind="core", width=64, slots=4, members=4, chunk_bytes=64, mod_stages=mod_stages)
    assert core.schedule.mod_stages == mod_stages
    assert core.schedule.latency == mod_stages + 10


def test_mod_stages_refused_with_a_sentence():
    with pytest.raises(ValueError, match="mod_stages must be a power of two"):
        verilog.build(kind="core", width=64, slots=4, members=4, chunk_bytes=64, mod_stages=3)


def test_cli_option_parsed_and_checked(capsys):
    import argparse

    parser = argparse.ArgumentParser()
    verilog.add_arguments(parser)
    assert verilog.options(parser.parse_args(["--mod-stages", "8"]))["mod_stages"] == 8
    assert verilog.options(parser.parse_args([]))["mod_stages"] == verilog.DEFAULTS["mod_stages"] == 16
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["--mod-stages", "3"])
    assert exc.value.code == 2
    assert "--mod-stages" in capsys.readouterr().err
