"""The language-model task of ``wanreduce train``: the corpus split, Streaming DiLoCo's schedule and clock,
the latency floor, and a reduced run (tiny transformer, three sites) whose syncs are the numpy group
average bit for bit, whose two transports (threads, processes) train the same bits, and whose JSON has
what the comparison promises.

The reduced training needs PyTorch (the ``train`` extra) and is skipped without it.
"""

import numpy as np
import pytest

from wanreduce.host.train.corpus import load_lm_split, stdlib_sources
from wanreduce.host.train.methods import (
    LM_METHODS,
    Method,
    Setting,
    SyncCost,
    latency_floor,
    simulate_clock,
    streaming_syncs,
)

from .test_train import _bits, reference_rounds


def _fake_stdlib(root):
    # Ten top-level modules of different sizes, one package with a test folder that must be left out.
    for i in range(10):
        (root / f"mod{i}.py").write_text(f"# module {i}\n" + "x = 1\n" * (50 + 30 * i))
    pkg = root / "pkg"
    (pkg / "tests").mkdir(parents=True)
    for j in range(4):
        (pkg / f"part{j}.py").write_text(f"def f{j}():\n    return {j}\n" * 40)
    (pkg / "tests" / "test_part.py").write_text("assert False\n")
    (root / "site-packages").mkdir()
    (root / "site-packages" / "other.py").write_text("y = 2\n")
    return root


def test_corpus_split_is_non_iid_by_module_and_holds_out_validation(tmp_path):
    root = _fake_stdlib(tmp_path)
    _, files = stdlib_sources(str(root))
    assert all("tests" not in rel and "site-packages" not in rel for _, rel in files)
    assert len(files) == 14
    split = load_lm_split(3, seed=1, context=16, val_windows=5, val_every=7, root=str(root))
    mods = [set(m) for m in split.site_modules]
    assert all(mods) and not (mods[0] & mods[1] or mods[0] & mods[2] or mods[1] & mods[2])
    assert set().union(*mods) <= {f"mod{i}" for i in range(10)} | {"pkg"}
    assert split.description["validation_files"] == 2
    assert split.val_windows.shape == (5, 17)
    # Volumes are balanced by the deal: no site holds more than twice another's bytes.
    sizes = [len(t) for t in split.site_text]
    assert max(sizes) <= 2 * min(sizes)
    again = load_lm_split(3, seed=1, context=16, val_windows=5, val_every=7, root=str(root))
    assert again is split  # cached
    other = load_lm_split(3, seed=2, context=16, val_windows=5, val_every=7, root=str(root))
    assert other.site_modules != split.site_modules or not np.array_equal(
        other.val_windows, split.val_windows
    )


def test_corpus_errors_name_the_problem(tmp_path):
    from wanreduce.spec.errors import WanreduceError

    with pytest.raises(WanreduceError, match="not found"):
        stdlib_sources(str(tmp_path / "missing"))
    with pytest.raises(WanreduceError, match="no Python sources"):
        stdlib_sources(str(tmp_path))


def test_streaming_schedule_is_staggered():
    got = {s: streaming_syncs(10, 2, s) for s in range(1, 31)}
    assert [s for s, f in got.items() if 0 in f] == [10, 20, 30]
    assert [s for s, f in got.items() if 1 in f] == [15, 25]
    assert all(len(f) <= 1 for f in got.values())


def _cost(bulk, n=3):
    return SyncCost([[[list(range(n))]]], [[[(bulk, 0.0)]]])


def test_streaming_clock_overlaps_tau_steps():
    s = Setting()
    step = s.step_s
    m = Method("s", "streaming", "ring", h=4, fragments=2, tau=2)
    # Syncs shorter than tau steps are hidden entirely.
    hidden = simulate_clock(m, _cost(1.5 * step), s, 12, 3)
    assert hidden[12] == pytest.approx(12 * step)
    # A sync of 3 steps after step 4 (fragment 0) must end by the end of step 6: one step of stall; the
    # next (fragment 1, after step 6) queues behind nothing and stalls step 8 by one more step.
    slow = simulate_clock(m, _cost(3 * step), s, 8, 3)
    assert slow[5] == pytest.approx(5 * step)
    assert slow[6] == pytest.approx(7 * step)
    assert slow[8] == pytest.approx(10 * step)
    # tau = 0: no overlap, as DiLoCo (the outer step waits for its sync).
    m0 = Method("s", "streaming", "ring", h=4, fragments=1, tau=0)
    d = Method("d", "diloco", "ring", h=4)
    assert np.allclose(simulate_clock(m0, _cost(0.7), s, 12, 3), simulate_clock(d, _cost(0.7), s, 12, 3))


def test_latency_floor_is_the_diameter_over_a_step():
    from wanreduce.host.topology import load_topology

    topo = load_topology("nine-city")
    s = Setting()
    diameter, floor = latency_floor(topo, s, s.step_s)
    pairs = [topo.one_way_s[i, j] for i in range(topo.n) for j in range(topo.n) if i != j]
    assert diameter == max(pairs)
    assert floor == pytest.approx(1 + diameter / s.step_s)
    # Every exact every-step method's clock respects it: a free sync still pays the last bucket's trip.
    m = Method("a", "allreduce", "ring")
    c = simulate_clock(m, SyncCost([[[list(range(3))]]], [[[(0.0, diameter)]]]), s, 5, 3)
    assert c[5] / (5 * s.step_s) == pytest.approx(floor)


def test_lm_methods_cover_the_comparison():
    names = {m.name for m in LM_METHODS()}
    for want in (
        "colocated",
        "ring",
        "wanreduce-root-onchip",
        "wanreduce-root-1mib",
        "wanreduce-root-onchip-delayed",
        "wanreduce-diloco-h10",
        "wanreduce-diloco-h50",
        "wanreduce-streaming-diloco",
        "diloco-ring-h10",
        "diloco-ring-h50",
        "streaming-diloco-ring",
    ):
        assert want in names
    s = Setting()
    onchip = next(m for m in LM_METHODS() if m.name == "wanreduce-root-onchip")
    assert s.memory_of(onchip) == 42_000_000 and s.ample_memory <= 16 << 30
    stream = next(m for m in LM_METHODS() if m.name == "wanreduce-streaming-diloco")
    assert s.bytes_for(stream) * stream.fragments == s.bytes_for(onchip)


TINY = dict(
    task="lm",
    seed=0,
    context=16,
    layers=2,
    width=16,
    heads=2,
    batch=2,
    warmup=2,
    weight_decay=0.0,
    lr=3e-3,
    outer_lr=0.7,
    alpha=0.5,
    momentum=0.9,
    dtype="bf16",
    engine="fast",
    chunk_elems=64,
    target=0.0,
    past_target=1.0,
    record=True,
)


def _trajs():
    everyone = [[[[2, 0, 1]]]]
    base = dict(h=1, steps=6, eval_every=3, syncs=everyone)
    return [
        dict(base, key="allreduce", algorithm="allreduce"),
        dict(base, key="delayed", algorithm="allreduce", pipelined=True),
        dict(base, key="diloco", algorithm="diloco", h=3),
        dict(base, key="streaming", algorithm="streaming", h=4, fragments=2, tau=1),
        dict(base, key="stream-as-diloco", algorithm="streaming", h=3, fragments=1, tau=0, alpha=0.0),
        dict(base, key="diloco-packets", algorithm="diloco", h=3, engine="packets"),
    ]


def test_reduced_lm_training_threads_and_processes_train_the_same_bits():
    pytest.importorskip("torch")
    from wanreduce.host.train.runner import run_sites

    threads = run_sites(3, TINY, _trajs(), timeout_s=600, transport="threads")
    for res in threads.values():
        for x, rounds, y in res["record"]:
            assert np.array_equal(_bits(y), _bits(reference_rounds(x, rounds, "bf16")))
        assert res["evals"][-1][1] != res["evals"][0][1]  # the model trained
    assert threads["allreduce"]["syncs"] == 6 and threads["diloco"]["syncs"] == 2
    assert threads["streaming"]["syncs"] == 2  # fragment 0 after step 4, fragment 1 after step 6
    # Exact every-step syncs keep the replicas identical; Streaming DiLoCo's local steps do not.
    f = threads["allreduce"]["final"]
    assert np.array_equal(_bits(f[0]), _bits(f[1])) and np.array_equal(_bits(f[0]), _bits(f[2]))
    assert not np.array_equal(
        _bits(threads["streaming"]["final"][0]), _bits(threads["streaming"]["final"][1])
    )
    # One fragment, no overlap, the new global weights taken whole: Streaming DiLoCo is DiLoCo.
    assert np.array_equal(_bits(threads["stream-as-diloco"]["final"]), _bits(threads["diloco"]["final"]))
    # The golden aggregator's packets and the fast path train the same bits.
    assert np.array_equal(_bits(threads["diloco-packets"]["final"]), _bits(threads["diloco"]["final"]))
    assert not np.array_equal(_bits(threads["delayed"]["final"]), _bits(threads["allreduce"]["final"]))
    # The process transport (gloo, DDP's communication hook, its buckets rebuilt after step 1) trains the
    # same bits as the threads, delayed gradients included.
    procs = run_sites(3, TINY, _trajs()[:2], timeout_s=600, transport="processes")
    for key, res in procs.items():
        assert np.array_equal(_bits(res["final"]), _bits(threads[key]["final"])), key


def test_reduced_lm_experiment_writes_what_the_comparison_promises(tmp_path):
    pytest.importorskip("torch")
    from wanreduce.host.train.experiment import write_json
    from wanreduce.host.train.lmexp import LMConfig, run_lm_experiment

    grid = {f: [{"lr": 3e-3}] for f in ("allreduce", "delayed")}
    grid.update(
        {f: [{"outer_lr": 0.7}, {"outer_lr": 0.4}] for f in ("diloco-h10", "diloco-h50", "streaming-h10")}
    )
    cfg = LMConfig(
        sites=3,
        context=16,
        width=16,
        heads=2,
        batch=2,
        max_steps=10,
        eval_every=5,
        target=5.3,
        schedule_time_s=0.5,
        grid=grid,
        methods=["ring", "wanreduce-root-onchip", "wanreduce-diloco-h10", "wanreduce-streaming-diloco"],
    )
    res = run_lm_experiment(cfg, log=lambda _: None)
    assert res["task"] == "lm" and res["target_loss"] == 5.3
    assert set(res["time_to_target_s"]) == {"colocated", *cfg.methods}
    for name, e in res["methods"].items():
        assert res["per_step_ratio"][name] > 0.99  # overlapped methods beat colocated's last bucket
        assert len(e["grid"]) == len(grid[e["family"]])
    assert res["per_step_ratio"]["colocated"] == pytest.approx(1.0)
    assert (
        res["methods"]["ring"]["per_step_ratio"] > res["methods"]["wanreduce-root-onchip"]["per_step_ratio"]
    )
    assert res["latency_floor"]["floor_ratio"] > 1.0
    write_json(res, str(tmp_path / "train.json"))


@pytest.mark.slow
def test_delayed_gradients_stall_without_wanreduce_too():
    """An independent check of what the delayed method shows on this task: the nine sites' gradients
    averaged in fp32 in one process (no hook, no wire dtype) and applied one step late through the same
    AdamW leave the model on the plateau near 3 nats, where the same gradients applied at once are well
    below it."""
    torch = pytest.importorskip("torch")
    from wanreduce.host.train.lm import AdamW, lm_batch, lm_loss, make_lm, validation_loss

    split = load_lm_split(9, val_windows=16)
    torch.set_num_threads(1)

    def train(delayed, steps=100):
        model = make_lm(0)
        opt = AdamW(model.parameters(), lr=4e-3, warmup=20)
        rngs = [np.random.default_rng([0, r]) for r in range(9)]
        prev = None
        for _ in range(steps):
            total = None
            for r in range(9):
                x, y = lm_batch(split.site_text[r], rngs[r], 2, 128)
                model.zero_grad()
                lm_loss(model, x, y).backward()
                g = [p.grad.clone() for p in model.parameters()]
                total = g if total is None else [a + b for a, b in zip(total, g, strict=True)]
            now = [a / 9 for a in total]
            use = (prev or [torch.zeros_like(a) for a in now]) if delayed else now
            prev = now
            for p, g in zip(model.parameters(), use, strict=True):
                p.grad = g
            opt.step()
        return validation_loss(model, split.val_windows)

    exact, delayed = train(False), train(True)
    assert exact < 2.6 and delayed > 2.9


def test_cli_bad_lm_options_are_one_line_and_exit_2(tmp_path, capsys):
    from wanreduce.cli import main

    out = [str(tmp_path / "t.json"), "--plot", str(tmp_path / "t.png")]
    assert main(["train", "--methods", "wanreduce-root-onchip,bogus", "-o", *out]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "unknown method(s) bogus" in err[-1]  # the setting, then the error
    assert not (tmp_path / "t.json").exists()
    with pytest.raises(SystemExit) as exc:
        main(["train", "--task", "lm", "--target", "0", "-o", *out])
    assert exc.value.code == 2
