"""The path estimate of ``python -m wanreduce.sim.synth.flow paths`` on hand-made ECP5 netlists: arrival times
add up along the deepest chain, carry hops cost little, an EBR read starts late, and endpoints come out
worst first, one per signal, named after what their flip-flop holds."""

import json

import pytest

from wanreduce.cli import main as cli_main
from wanreduce.sim.synth import flow as synth


def _netlist(tmp_path, cells, netnames):
    top = "t"
    body = {
        "modules": {
            top: {
                "ports": {"clk": {"direction": "input", "bits": [2]}},
                "cells": cells,
                "netnames": {n: {"bits": b, "hide_name": 0} for n, b in netnames.items()},
            }
        }
    }
    path = tmp_path / "n.json"
    path.write_text(json.dumps(body))
    return path, top


def _ff(d, q):
    return {"type": "TRELLIS_FF", "connections": {"CLK": [2], "DI": [d], "Q": [q]}}


def _lut(z, *ins):
    return {
        "type": "LUT4",
        "connections": {"Z": [z], **{p: [b] for p, b in zip("ABCD"[: len(ins)], ins, strict=True)}},
    }


def test_deepest_chain_ranks_first(tmp_path):
    # a (10) -> LUT -> LUT -> LUT -> y (20); a -> LUT -> x (30); a fed back from x through a register.
    cells = {
        "a_ff": _ff(31, 10),
        "l1": _lut(11, 10),
        "l2": _lut(12, 11, 10),
        "l3": _lut(13, 12),
        "y_ff": _ff(13, 20),
        "lx": _lut(14, 10),
        "x_ff": _ff(14, 30),
        "b_ff": _ff(30, 31),
    }
    names = {"core.a": [10], "core.y": [20], "core.x": [30], "core.b": [31], "core.mid": [12]}
    path, top = _netlist(tmp_path, cells, names)
    ranked = synth.estimate_paths(path, top)
    assert [r[1] for r in ranked[:2]] == ["core.y", "core.x"]
    lut = synth._LUT + synth._ROUTE
    end = synth._ROUTE + 0.1
    assert ranked[0][0] == pytest.approx(synth._CLK_Q + 3 * lut + end, abs=0.01)
    assert ranked[1][0] == pytest.approx(synth._CLK_Q + lut + end, abs=0.01)
    assert "core.mid" in ranked[0][3]
    assert [r[1] for r in synth.estimate_paths(path, top, under="core.x")] == ["core.x"]


def test_carry_chain_and_memory_read(tmp_path):
    # An EBR output through a 4-cell carry chain into a register, against a 3-LUT chain from a register.
    cells = {
        "ebr": {"type": "DP16KD", "connections": {"DOA0": [40], "CLKA": [2]}},
        "c0": {"type": "CCU2C", "connections": {"A0": [40], "COUT": [41]}},
        "c1": {"type": "CCU2C", "connections": {"CIN": [41], "COUT": [42]}},
        "c2": {"type": "CCU2C", "connections": {"CIN": [42], "COUT": [43]}},
        "c3": {"type": "CCU2C", "connections": {"CIN": [43], "S1": [44]}},
        "s_ff": _ff(44, 50),
        "r_ff": _ff(50, 60),
        "l1": _lut(61, 60),
        "l2": _lut(62, 61),
        "l3": _lut(63, 62),
        "t_ff": _ff(63, 70),
    }
    path, top = _netlist(tmp_path, cells, {"core.sum": [50], "core.r": [60], "core.t": [70]})
    ranked = {r[1]: r[0] for r in synth.estimate_paths(path, top)}
    lut = synth._LUT + synth._ROUTE
    end = synth._ROUTE + 0.1
    assert ranked["core.sum"] == pytest.approx(synth._EBR_CLK_Q + lut + 2 * 0.06 + 0.3 + end, abs=0.01)
    assert ranked["core.t"] == pytest.approx(synth._CLK_Q + 3 * lut + end, abs=0.01)
    assert ranked["core.sum"] > ranked["core.t"]


def test_work_folder_outside_build_refused(capsys):
    assert cli_main(["synth", "paths", "--name", "../elsewhere"]) == 2
    assert "plain folder name" in capsys.readouterr().err
