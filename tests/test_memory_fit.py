"""fit_suggestions: each phrase is a computed claim; re-check it with memory_breakdown."""

from __future__ import annotations

import re
from dataclasses import replace

from gpuplan.estimators.memory import memory_breakdown
from gpuplan.report.estimate import fit_phrase
from gpuplan.search.fit import fit_options
from gpuplan.spec import R_NONE, Layout, ModelSpec
from gpuplan.units import GiB

OVER = dict(runtime_overhead_bytes=2 * GiB, fragmentation=0.05)
LLAMA2_70B = ModelSpec(id="llama2-70b", name="Llama 2 70B", layers=80, hidden=8192, heads=64,
                       kv_heads=8, ffn=28672, vocab=32000, mlp="swiglu")
CAP = 80 * GiB
FLAG = {"recompute": ("recompute", {"none": 0, "selective": 1, "full": 2}.get),
        "zero": ("zero", int), "micro-batch": ("micro_batch", int), "tp": ("tp", int),
        "pp": ("pp", int)}


def fit_suggestions(*args, **kwargs) -> list[str]:
    """The phrases `gpuplan estimate` prints for the typed fit options."""
    return [fit_phrase(o) for o in fit_options(*args, **kwargs)]


def total_gib(lay: Layout) -> float:
    return float(memory_breakdown(LLAMA2_70B, lay, **OVER).total) / GiB


def apply(phrase: str, lay: Layout, gpus: int) -> Layout:
    """The layout a phrase describes (the test's own reading of the flags)."""
    if m := re.match(r"needs >= (\d+) GPUs with --zero 3( --recompute full)?", phrase):
        n = int(m.group(1))
        new = replace(lay, zero=3, dp=n // (lay.tp * lay.pp * lay.cp))
        return replace(new, recompute=2) if m.group(2) else new
    if "--offload" in phrase:
        return replace(lay, offload=True)
    m = re.match(r"fits with --([a-z-]+) (\w+)", phrase)
    assert m, phrase
    field, conv = FLAG[m.group(1)]
    new = replace(lay, **{field: conv(m.group(2))})
    if field in ("tp", "pp"):
        new = replace(new, dp=gpus // (new.tp * new.pp * new.cp))
    return new


def test_every_suggestion_fits_and_reports_its_memory(capsys):
    """70B on 16 GPUs (tp 8, dp 2) without recompute or ZeRO does not fit in 80 GiB; every
    suggestion, applied, fits, and the GiB it quotes is the recomputed total (0.05 GiB: one
    decimal printed). Nothing is printed."""
    lay = Layout(tp=8, dp=2, seq_len=4096, micro_batch=2, global_batch=1024, recompute=R_NONE)
    assert total_gib(lay) > 80
    out = fit_suggestions(LLAMA2_70B, lay, CAP, 16, **OVER)
    assert out, "a 70B model has ways to fit on 16+ GPUs"
    for phrase in out:
        used = float(re.search(r"\(([\d.]+) GiB of 80.0 GiB\)", phrase).group(1))
        got = total_gib(apply(phrase, lay, 16))
        assert got <= 80 and abs(got - used) < 0.05, (phrase, got)
    assert capsys.readouterr().out == ""


def test_order_is_least_disruptive_first_and_gpu_count_is_minimal():
    """Recompute before ZeRO before offload ... before more GPUs; the GPU count quoted is the
    smallest valid multiple of 8 that fits: the next smaller valid count does not."""
    lay = Layout(tp=8, pp=1, dp=1, seq_len=4096, micro_batch=1, global_batch=64)
    out = fit_suggestions(LLAMA2_70B, lay, CAP, 8, **OVER)
    rank = ["--recompute", "--zero", "--offload", "--micro-batch", "--tp", "--pp"]
    pos = [len(rank) if "GPUs" in p else next(i for i, k in enumerate(rank) if k in p)
           for p in out]
    assert pos == sorted(pos)
    gpu = [p for p in out if "GPUs" in p]
    assert gpu, out
    n = int(re.search(r">= (\d+) GPUs", gpu[0]).group(1))
    smaller = [k for k in range(8, n, 8) if 64 % (k // 8) == 0]  # dp must divide the batch
    for k in smaller:
        assert total_gib(replace(lay, zero=3, dp=k // 8)) > 80


def test_fits_already_gives_nothing():
    lay = Layout(tp=8, pp=2, dp=4, zero=1, seq_len=4096, micro_batch=1, global_batch=1024,
                 recompute=1)
    assert total_gib(lay) < 80
    assert fit_suggestions(LLAMA2_70B, lay, CAP, 64, **OVER) == []


def test_hopeless_config_falls_back_to_gpus_with_full_recompute():
    """tp 1 with no recompute cannot fit at any GPU count (one layer's activations alone exceed
    the GPU); the last resort pairs ZeRO-3 with full recompute, and it really fits."""
    lay = Layout(dp=8, seq_len=4096, micro_batch=1, global_batch=1024)
    out = fit_suggestions(LLAMA2_70B, lay, CAP, 8, **OVER)
    last = out[-1]
    assert "--zero 3 --recompute full" in last
    assert total_gib(apply(last, lay, 8)) <= 80


def test_one_by_one_and_on_a_grid_find_the_same_options(monkeypatch):
    """A few variants are checked one by one (rules.first_broken, memory_one), many on a grid
    (Layout.valid_mask, memory.most_loaded_total); forced either way, both give the same knobs
    and flags, and memory to 1e-9 relative (the scalar path's stated agreement)."""
    from gpuplan.search import fit

    cases = [(Layout(tp=8, dp=2, seq_len=4096, micro_batch=2, global_batch=1024), 16),
             (Layout(tp=8, pp=1, dp=1, seq_len=4096, micro_batch=1, global_batch=64), 8),
             (Layout(dp=8, seq_len=4096, micro_batch=1, global_batch=1024), 8),
             (Layout(tp=4, pp=2, dp=4, seq_len=8192, micro_batch=4, global_batch=512,
                     recompute=2), 32)]
    for lay, gpus in cases:
        results = []
        for rows in (10**9, 0):  # every search one by one, then every search on a grid
            monkeypatch.setattr(fit, "SCALAR_ROWS", rows)
            results.append(fit_options(LLAMA2_70B, lay, CAP, gpus, **OVER))
        one, grid = results
        assert one, lay
        assert [(o.knob, o.flags, o.gpus) for o in one] == [(o.knob, o.flags, o.gpus)
                                                            for o in grid]
        assert all(abs(a.memory_gib - b.memory_gib) <= 1e-9 * b.memory_gib
                   for a, b in zip(one, grid, strict=True))
