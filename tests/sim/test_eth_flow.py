"""The Ethernet board builds' figures: nextpnr's per-net Fmax mapped to the receive, transmit and core
clock domains, each with the constraint it is held to."""

import json

from wanreduce.cli import main
from wanreduce.sim.synth.eth_flow import figures

# Net names as nextpnr reports them (synthesis names a clock net after one of its loads): the core's
# net here carries a receive-side name, which only its constraint tells apart.
TWO_PORTS = {
    "$glbnet$board.wan_mac.rx_cdc.r_clk": {"achieved": 104.5, "constraint": 100},
    "$glbnet$board.wan_mac.rx_reset.async_ff_clk": {"achieved": 131.0, "constraint": 125},
    "$glbnet$board.lan_mac.rx_reset.async_ff_clk": {"achieved": 128.0, "constraint": 125},
    "$glbnet$board.lan_mac.tx_mac.clk": {"achieved": 140.0, "constraint": 125},
}


def test_clock_nets_map_to_their_domains():
    got = figures({"fmax_all": TWO_PORTS, "core_mhz": 100, "luts": 9, "ebr": 3, "seed": 2}, "board_inline")
    assert got == {
        "board_inline_eth_rx_fmax_mhz": 128.0,  # the slower of the two receive clocks
        "board_inline_eth_rx_target_mhz": 125,
        "board_inline_eth_tx_fmax_mhz": 140.0,
        "board_inline_eth_tx_target_mhz": 125,
        "board_inline_core_fmax_mhz": 104.5,
        "board_inline_core_target_mhz": 100,
        "board_inline_luts": 9,
        "board_inline_ebr": 3,
        "board_inline_eth_seed": 2,
    }


def test_one_port_names_and_a_missing_clock():
    fmax = {"$glbnet$board.bridge.clk": {"achieved": 101.0, "constraint": 100}}
    got = figures({"fmax_all": fmax, "core_mhz": 100, "luts": 1, "ebr": 2, "seed": 1})
    assert got["board_core_fmax_mhz"] == 101.0 and got["board_eth_luts"] == 1 and got["board_eth_ebr"] == 2
    assert got["board_eth_rx_fmax_mhz"] is None and got["board_eth_tx_target_mhz"] is None


def test_a_wrong_board_gets_one_line(capsys):
    assert main(["synth", "eth", "--board", "icebreaker"]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "icebreaker" in err


# -- provenance: a placement's figures are current only while the code gives the design that was placed ----
NAME = "wanreduce_eth"
IL = 'attribute \\src "/a/hw/eth/board.py:{line}"\nmodule \\wanreduce_eth\n  wire width {width} \\clk\nend\n'


def _placement(wd, *, board="ecpix5_85", width=1, line=10, digest="compute"):
    """A fake placement of ``board`` in ``wd``: the design files the tools were given and the result.json
    :func:`bitstream` writes (no tools run). ``digest``: "compute" records the placed files' digest, None
    records none (a placement made before digests were)."""
    from wanreduce.sim.synth import eth_flow

    wd.mkdir(parents=True, exist_ok=True)
    (wd / f"{NAME}.il").write_text(IL.format(line=line, width=width))
    (wd / f"{NAME}.ys").write_text(f"read_rtlil {NAME}.il\nsynth_ecp5 -top {NAME}\n")
    (wd / f"{NAME}.lpf").write_text('FREQUENCY PORT "clk" 100000000.0 HZ;\n')
    (wd / f"build_{NAME}.json").write_text('{"commands": [["nextpnr-ecp5", "--seed", "1"]]}\n')
    result = {
        "board": board,
        "seed": 1,
        "name": NAME,
        "fmax_all": {"$glbnet$board.bridge.clk": {"achieved": 101.0, "constraint": 100}},
        "core_mhz": 100,
        "luts": 7,
        "ebr": 2,
    }
    if digest == "compute":
        result["design_digest"] = eth_flow.placed_digest(wd, NAME)
    elif digest is not None:
        result["design_digest"] = digest
    (wd / "result.json").write_text(json.dumps(result))
    return result


def _current(tmp_path):
    """The digest the "current code" gives: that of a fresh fake placement."""
    from wanreduce.sim.synth.eth_flow import placed_digest

    _placement(tmp_path / "now")
    return placed_digest(tmp_path / "now", NAME)


def test_the_design_digest_ignores_source_lines_only(tmp_path):
    from wanreduce.sim.synth.eth_flow import placed_digest

    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    _placement(a)
    _placement(b, line=99)  # the same design made from other Python lines
    _placement(c, width=2)
    assert placed_digest(a, NAME) == placed_digest(b, NAME) != placed_digest(c, NAME)
    (a / f"{NAME}.lpf").write_text('FREQUENCY PORT "clk" 125000000.0 HZ;\n')
    assert placed_digest(a, NAME) != placed_digest(b, NAME)  # the constraints are part of the design


def test_a_placement_of_the_current_design_is_current_and_another_is_not(tmp_path):
    from wanreduce.sim.synth.eth_flow import placement_status

    current = _current(tmp_path)
    same = _placement(tmp_path / "same", line=42)
    assert placement_status(same, tmp_path / "same", current=current) == (None, current)
    other = _placement(tmp_path / "other", width=3)
    why, placed = placement_status(other, tmp_path / "other", current=current)
    assert placed != current
    assert "ecpix5_85" in why and "wanreduce synth eth --board ecpix5_85" in why and "\n" not in why


def test_a_result_without_a_digest_is_digested_from_its_placed_files(tmp_path):
    from wanreduce.sim.synth import eth_flow

    current = _current(tmp_path)
    old = _placement(tmp_path / "old", digest=None)
    assert eth_flow.placement_status(old, tmp_path / "old", current=current) == (None, current)
    changed = _placement(tmp_path / "changed", width=5, digest=None)
    why, _ = eth_flow.placement_status(changed, tmp_path / "changed", current=current)
    assert why and "another design" in why
    # Backfilled from the placed files, not from the code: the changed placement keeps its own digest.
    stored = eth_flow.record_digest("ecpix5_85", out_dir=tmp_path / "changed")
    assert stored != current
    assert json.loads((tmp_path / "changed" / "result.json").read_text())["design_digest"] == stored
    # Without its design files a placement cannot be told current.
    (tmp_path / "old" / f"{NAME}.il").unlink()
    why, placed = eth_flow.placement_status(old, tmp_path / "old", current=current)
    assert placed is None and "no design digest" in why and f"{NAME}.il" in why


def test_the_bench_records_a_placement_of_other_code_as_stale(tmp_path, monkeypatch):
    from wanreduce.sim import figures as recorded
    from wanreduce.sim.bench import eth as bench
    from wanreduce.sim.synth import eth_flow

    current = _current(tmp_path)
    _placement(tmp_path / "eth_ecpix5_85", board="ecpix5_85", line=3)  # current, moved lines only
    _placement(tmp_path / "eth_versa_ecp5", board="versa_ecp5", width=4)  # placed from other code
    monkeypatch.setattr(eth_flow, "result_path", lambda board: tmp_path / f"eth_{board}" / "result.json")
    monkeypatch.setattr(eth_flow, "current_digest", lambda board, **kw: current)
    values, marks = bench.placed_figures()
    assert values["board_core_fmax_mhz"] == 101.0 and values["board_inline_core_fmax_mhz"] == 101.0
    assert not any(name.startswith("board_") and not name.startswith("board_inline") for name in marks)
    assert {n for n in values if n.startswith("board_inline")} == set(marks)
    assert all(s == "stale" and "versa_ecp5" in note for s, note in marks.values())

    # Recorded as the bench runner records them, `figures check` lists the stale ones and only those.
    statuses = {n: s for n, (s, _) in marks.items()}
    notes = {n: note for n, (_, note) in marks.items()}
    recs = recorded.records(values, sources=[], command="b", statuses=statuses, notes=notes, root=tmp_path)
    assert recs["board_core_fmax_mhz"]["status"] == "ok"
    assert recs["board_inline_core_fmax_mhz"]["status"] == "stale"
    data = {"figures": recs, "regions": {"t": "{board_core_fmax_mhz} {board_inline_core_fmax_mhz}"}}
    monkeypatch.setattr(recorded, "used_regions", lambda root: {"t"})
    why = recorded.stale(tmp_path, data)
    assert set(why) == {"board_inline_core_fmax_mhz"}
    assert "wanreduce synth eth --board versa_ecp5" in why["board_inline_core_fmax_mhz"]
