"""The estimate against PyTorch on CPU: the measurement harness on a grid of small models.

The issue allows 3% for weights/gradients/optimizer and 10% for activations. On this grid we
reach: weights and gradients exact, optimizer state within 0.33% (fp32 Adafactor, whose state is
so small that the 4-byte `step` counters show; < 0.01% otherwise), layer activations within
0.4% (torchtitan's per-op SAC exactly; Megatron's core_attn+mlp modules -0.39%, the norm
statistics being a larger share of what that mode keeps), head activations within 0.8%. We
assert 0.5%, 1% and 2%: the only things the estimate leaves out are those `step` counters,
norm statistics (s*b floats per norm) and the integer targets saved by the loss, all shrinking
as 1/hidden. Recompute modes on the grid: none, selective (core attention), full (every layer
and every 2nd), op (torchtitan `selective_ac_option = "op"`, its own policy run through
torch.utils.checkpoint's selective checkpointing) and Megatron-LM's recompute modules mlp and
core_attn+mlp.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch  # noqa: E402,F401  (this folder is the torch harness: pip install -e '.[test,bench]')

from gpuplan.calibrate.memory import (  # noqa: E402
    HarnessConfig,
    compare,
    default_grid,
    main,
    measure,
)

GRID = default_grid()
STATE_TOL = 0.005  # reached 0.0033 (fp32 Adafactor), < 0.0001 otherwise
ACT_TOL = 0.01  # reached 0.0039 (core_attn+mlp), 0.002 otherwise
HEAD_TOL = 0.02  # reached 0.008


@pytest.fixture(scope="module")
def results() -> dict[str, dict]:
    return {c.label(): compare(c) for c in GRID}


@pytest.mark.parametrize("cfg", GRID, ids=[c.label() for c in GRID])
def test_model_state_within_half_percent(cfg, results):
    """Weights, gradients and optimizer state (incl. the fp32 master copy for bf16; AdamW, SGD
    momentum, factored Adafactor) predicted within 0.5% of what PyTorch allocates (issue: 3%)."""
    r = results[cfg.label()]
    assert r["measured"]["params"] == r["predicted"]["params"]
    for key in ("weights_bytes", "gradients_bytes", "optimizer_bytes"):
        assert abs(r["rel_error"][key]) < STATE_TOL, (key, r["rel_error"][key])


@pytest.mark.parametrize("cfg", GRID, ids=[c.label() for c in GRID])
def test_layer_activations_within_one_percent(cfg, results):
    """Bytes saved for backward by the transformer layers (each storage once) predicted within 1%
    (issue tolerance 10%): fp32/bf16, GELU/SwiGLU, MHA/GQA, explicit/flash, recompute modes
    none, selective, full (every k-th layer), op and Megatron's modules."""
    err = results[cfg.label()]["rel_error"]["layer_activation_bytes"]
    assert abs(err) < ACT_TOL, err


@pytest.mark.parametrize("cfg", GRID, ids=[c.label() for c in GRID])
def test_head_activations_within_two_percent(cfg, results):
    """Final norm + LM head inputs and the fp32 log-softmax kept by the loss, within 2%."""
    err = results[cfg.label()]["rel_error"]["head_activation_bytes"]
    assert abs(err) < HEAD_TOL, err


def test_activations_scale_with_micro_batch_and_layers():
    """The measurement itself is exactly linear in micro-batch and in layers (SDPA path, so no
    constant mask buffer): doubling both quadruples the layer activations."""
    base = HarnessConfig(arch="llama", kv_heads=2, attention="sdpa", layers=1, micro_batch=1)
    a = measure(base)["layer_activation_bytes"]
    b = measure(replace(base, layers=2, micro_batch=2))["layer_activation_bytes"]
    assert b == 4 * a


def test_sdpa_saves_gqa_kv_compact():
    """Under SDPA with enable_gqa, K/V are saved at kv-head width: one KV head instead of four
    saves exactly 2 * 3 * d * s * b fp32 elements, as the estimate assumes for flash attention."""
    sdpa = HarnessConfig(arch="llama", kv_heads=1, attention="sdpa", layers=1)
    m = measure(sdpa)
    full = measure(replace(sdpa, kv_heads=4))
    d = sdpa.hidden // sdpa.heads
    repeated = 2 * (4 - 1) * d * sdpa.seq_len * sdpa.micro_batch * 4  # fp32 K and V
    assert full["layer_activation_bytes"] - m["layer_activation_bytes"] == repeated


def test_cli_prints_table(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "layer acts pred/meas" in out
    assert len([ln for ln in out.splitlines() if ln.startswith(("gpt", "llama"))]) == len(GRID)
