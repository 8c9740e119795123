"""Recorded figures (wanreduce.sim.figures): the committed regions equal their rendering, a region edited by
hand is caught, records carry their provenance, staleness follows the sources, a failing bench module
leaves its figures marked failed. No benchmark runs here."""

import json
import re
import shutil
import sys
import types

import pytest

from wanreduce.sim import bench as bench_main
from wanreduce.sim import figures


def _copy_docs(tmp_path):
    """README.md, docs/*.md and docs/figures.json in a scratch tree (not a git checkout)."""
    (tmp_path / "docs").mkdir()
    shutil.copy(figures.ROOT / "README.md", tmp_path / "README.md")
    for p in (figures.ROOT / "docs").glob("*.md"):
        shutil.copy(p, tmp_path / "docs" / p.name)
    shutil.copy(figures.ROOT / figures.FIGURES_FILE, tmp_path / figures.FIGURES_FILE)
    return tmp_path


def test_committed_regions_equal_their_rendering():
    assert figures.region_problems() == []


def test_every_quoted_figure_is_recorded_with_its_provenance():
    data = figures.load()
    used = figures.used_regions()
    assert used, "README.md has no generated region"
    assert used <= set(data["regions"])
    for region in used:
        for name in figures.quoted(data["regions"][region]):
            rec = data["figures"][name]
            assert all(k in rec for k in figures.REQUIRED), name
            assert rec["digest"].startswith("sha256:") and rec["command"], name
            assert rec.get("status", "ok") in ("ok", "failed", "stale"), name


def test_rate_bound_figure_is_recorded_and_in_range():
    rec = figures.load()["figures"]["rate_bound_sim_over_model"]
    assert rec["status"] == "ok" and 0.95 <= rec["value"] <= 1.05


def test_a_region_edited_by_hand_is_caught(tmp_path):
    root = _copy_docs(tmp_path)
    assert figures.region_problems(root) == []
    readme = root / "README.md"
    text = readme.read_text()
    m = re.search(r"<!-- figures: demo-table -->(.*?)<!-- /figures -->", text, re.DOTALL)
    assert m
    edited = m.group(1).replace(" ms", " ms ", 1)
    assert edited != m.group(1)
    readme.write_text(text[: m.start(1)] + edited + text[m.end(1) :])
    problems = figures.region_problems(root)
    assert len(problems) == 1 and "demo-table" in problems[0] and "README.md" in problems[0]
    assert figures.render(root) == ["README.md"]
    assert readme.read_text() == text and figures.region_problems(root) == []


def test_a_region_without_template_is_reported(tmp_path):
    root = _copy_docs(tmp_path)
    page = root / "docs" / "extra.md"
    page.write_text("x <!-- figures: no-such-region -->1.0<!-- /figures --> y\n")
    assert any("no-such-region" in p for p in figures.region_problems(root))


def test_templates_format_scale_and_refuse_unknown_names():
    figs = {
        "t_s": {"value": 0.2268},
        "n": {"value": 120303},
        "gone": {"value": None},
        "old": {"value": 3.0, "status": "stale"},
    }
    assert figures.render_text("{t_s*1e3:.1f} ms", figs) == "226.8 ms"
    assert figures.render_text("{old:.1f}", figs) == "3.0" + figures.STALE_MARK
    assert figures.render_text("{n:,}", figs) == "120,303"
    assert figures.render_text(["a {n}", "b"], figs) == "\na 120303\nb\n"
    assert figures.render_text("{gone}", figs) == "(gone failed)"
    with pytest.raises(figures.FiguresError, match="missing"):
        figures.render_text("{missing}", figs, "r")


def test_stale_follows_the_sources(tmp_path):
    root = _copy_docs(tmp_path)
    (root / "src").mkdir()
    (root / "src" / "a.py").write_text("x = 1\n")
    rec = figures.records(
        {"fig_s": 1.5}, sources=["src"], command="python -m x", output="out.json", root=root
    )
    assert rec["fig_s"]["unit"] == "s" and rec["fig_s"]["cores"] >= 1
    data = {"figures": rec, "regions": {"r": "{fig_s:.1f} s"}}
    figures.save(data, root)
    (root / "docs" / "page.md").write_text("It takes <!-- figures: r -->?<!-- /figures -->.\n")
    for p in root.glob("README.md"):
        p.unlink()
    for p in (root / "docs").glob("*.md"):
        if p.name != "page.md":
            p.unlink()
    assert figures.render(root) == ["docs/page.md"]
    assert (root / "docs" / "page.md").read_text() == "It takes <!-- figures: r -->1.5 s<!-- /figures -->.\n"
    assert figures.check(root) == []
    (root / "src" / "a.py").write_text("x = 2\n")
    lines = figures.check(root)
    assert lines == ["refresh with: python -m x", "  stale: fig_s: src changed since unknown"]
    # Refreshing without running takes the new record from the producer's output file.
    new = figures.records(
        {"fig_s": 2.5}, sources=["src"], command="python -m x", output="out.json", root=root
    )
    figures.write_output(root / "out.json", new)
    ran, failed = figures.refresh(root, run=False, log=lambda *_: None)
    assert ran == [] and failed == [] and figures.check(root) == []
    assert "2.5 s" in (root / "docs" / "page.md").read_text()

    # A current figure keeps its record on a plain refresh, even when the producer ran again since; naming
    # the producer takes its later run of the same code, never a run of other code.
    def rerun(value):
        later = figures.records(
            {"fig_s": value}, sources=["src"], command="python -m x", output="out.json", root=root
        )
        later["fig_s"]["date"] = "9999-01-01T00:00:00Z"
        figures.write_output(root / "out.json", later)

    (root / "src" / "a.py").write_text("x = 3\n")
    rerun(4.5)
    (root / "src" / "a.py").write_text("x = 2\n")
    figures.refresh(root, run=False, only=["python -m x"], log=lambda *_: None)
    assert "2.5 s" in (root / "docs" / "page.md").read_text() and figures.check(root) == []
    rerun(3.5)
    figures.refresh(root, run=False, log=lambda *_: None)
    figures.refresh(root, run=False, only=["python -m y"], log=lambda *_: None)
    assert "2.5 s" in (root / "docs" / "page.md").read_text()
    figures.refresh(root, run=False, only=["python -m x"], log=lambda *_: None)
    assert "3.5 s" in (root / "docs" / "page.md").read_text() and figures.check(root) == []


def test_a_record_outlives_a_change_that_keeps_its_designs(tmp_path, monkeypatch):
    """A record with design digests is attested current after a change under its design sources that leaves
    the designs' bytes as they were; a changed design or a changed flow source leaves it stale."""
    root = _copy_docs(tmp_path)
    for d in ("gw", "flow"):
        (root / d).mkdir()
    (root / "gw" / "core.py").write_text("width = 64\n")
    (root / "flow" / "run.py").write_text("seed = 1\n")
    design = {"core": "sha256:aa"}
    calls = []
    producer = types.ModuleType("fake_synth_designs")
    producer.DESIGN_SOURCES = ("gw/",)
    producer.designs = lambda: calls.append(1) or dict(design)
    monkeypatch.setitem(sys.modules, "fake_synth_designs", producer)
    sources = ["flow/run.py", "gw/core.py"]
    prov = figures.provenance(sources, "wanreduce bench --only fake", output="out.json", root=root)
    prov.update(figures.design_provenance("fake_synth_designs", sources, root=root))
    data = {"figures": figures.records({"fake_mhz": 120.0}, prov=prov, root=root), "regions": {}}
    data["regions"]["r"] = "{fake_mhz} MHz"
    figures.save(data, root)
    for p in [root / "README.md", *(root / "docs").glob("*.md")]:
        p.unlink()
    (root / "docs" / "page.md").write_text("<!-- figures: r -->?<!-- /figures -->\n")
    figures.render(root)
    assert figures.stale(root) == {}

    def attested():
        data = figures.load(root)
        done = figures.attest(root, data, log=lambda *_: None)
        figures.save(data, root)
        return done

    # The gateware's text changes, its design does not: stale until attested, then current.
    (root / "gw" / "core.py").write_text("width = 64  # same logic\n")
    assert list(figures.stale(root)) == ["fake_mhz"]
    n = len(calls)
    assert attested() == ["fake_mhz"] and len(calls) == n + 1
    assert figures.stale(root) == {}
    # The check itself never recomputes a design.
    figures.check(root)
    assert len(calls) == n + 1
    # The design's bytes change: stale, and no attestation.
    (root / "gw" / "core.py").write_text("width = 128\n")
    design["core"] = "sha256:bb"
    assert attested() == [] and list(figures.stale(root)) == ["fake_mhz"]
    # A flow source changes while the design is as recorded: stale too.
    design["core"] = "sha256:aa"
    (root / "gw" / "core.py").write_text("width = 64\n")
    (root / "flow" / "run.py").write_text("seed = 2\n")
    assert attested() == [] and list(figures.stale(root)) == ["fake_mhz"]


def test_design_digests_leave_out_source_locations_only():
    from wanreduce.sim.synth.designs import digest_files as sha

    a = 'attribute \\src "hw/core.py:10"\ncell $and $1\nend\n'
    b = 'attribute \\src "hw/core.py:99"\ncell $and $1\nend\n'
    c = 'attribute \\src "hw/core.py:10"\ncell $or $1\nend\n'
    v1, v2 = '(* src = "a.py:1" *) wire x;\n', '(* src = "b.py:7" *) wire x;\n'
    assert sha([("t.il", a)]) == sha([("t.il", b)]) != sha([("t.il", c)])
    assert sha([("t.v", v1)]) == sha([("t.v", v2)])
    assert sha([("t.v", v1)]) != sha([("u.v", v1)])


def test_a_failing_bench_module_marks_its_figures_failed(tmp_path, monkeypatch, capsys):
    out = tmp_path / "bench.json"
    cmd = bench_main.command_of("broken", str(out))
    figures.write_output(
        out,
        {
            **figures.records({"broken_s": 3.0}, sources=["spec"], command=cmd, output=str(out)),
            **figures.records({"other_s": 1.0}, sources=["spec"], command="python -m other", output=str(out)),
        },
    )
    fake = types.ModuleType("wanreduce.sim.bench.broken")

    def run():
        raise RuntimeError("the harness fell over")

    fake.run, fake.SOURCES = run, ("spec",)
    monkeypatch.setitem(sys.modules, "wanreduce.sim.bench.broken", fake)
    assert bench_main.run_benchmarks(["broken"], str(out), log=lambda s: None, err=print) == ["broken"]
    recs = json.loads(out.read_text())["figures"]
    assert recs["broken_s"]["status"] == "failed" and recs["broken_s"]["value"] is None
    assert "fell over" in recs["broken_s"]["note"]
    assert recs["other_s"]["status"] == "ok" and recs["other_s"]["value"] == 1.0


def test_no_measured_number_in_a_readme_table_outside_a_region():
    text = re.sub(
        r"<!-- figures: .*?<!-- /figures -->", "", (figures.ROOT / "README.md").read_text(), flags=re.S
    )
    unit = re.compile(r"\d[\d,.]*\s*(ms|s|MHz|GB/s|Gbit/s|MB|MiB|GiB|KiB|%|x|LUTs?|FFs?)\b")
    for line in text.splitlines():
        if line.startswith("|"):
            bare = re.sub(r"`[^`]*`", "", line)
            assert not unit.search(bare), line


def test_module_sources_follow_the_imports():
    model = set(figures.module_sources("wanreduce.sim.bench.model"))
    assert {"host/wan.py", "host/costmodel.py", "host/data/nine_city.csv", "spec/core.py"} <= model
    assert not any(n.startswith("hw/") for n in model), "the model bench imports no gateware"
    agg = set(figures.module_sources("wanreduce.sim.bench.agg"))
    assert {"hw/slot_table.py", "sim/verilator/harness.cpp", "sim/verify/traffic.py"} <= agg
    # what a bench does not import (the software aggregator, the recording machinery) does not age it
    assert not {"host/aggd.py", "sim/figures.py", "sim/bench/__init__.py"} & agg
    fadd = set(figures.module_sources("wanreduce.sim.bench.fadd"))
    assert "hw/fadd.py" in fadd and "hw/slot_table.py" not in fadd
