"""FLOPs per token and compute time (issue #4), checked against independent published formulas."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.catalog import load_catalog
from gpuplan.estimators.compute import (
    FWD_BWD,
    ROUTER_BYTES_PER_EXPERT,
    Efficiency,
    compute_time,
    elementwise_bytes_per_token_layer,
    expert_gemm_dim,
    expert_gemm_rows,
    flops_per_token,
    matmul_efficiency,
    memory_bound_time,
    moe_routing_elems_per_token,
)
from gpuplan.spec import BF16, FP8, R_FULL, R_NONE, R_SELECTIVE, ModelSpec


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def gpt(layers: int, hidden: int, vocab: int = 51200, heads: int = 0) -> ModelSpec:
    return ModelSpec(id="gpt", name="gpt", layers=layers, hidden=hidden,
                     heads=heads or hidden // 128, kv_heads=heads or hidden // 128,
                     ffn=4 * hidden, vocab=vocab, tied_embeddings=True)


def megatron_2021_flops_per_token(L: int, h: int, s: int, V: int) -> float:
    """Narayanan et al. 2021 eq. 3 (full recompute), per token: 96 l h^2 (1 + s/6h + V/16lh)."""
    return 96 * L * h**2 * (1 + s / (6 * h) + V / (16 * L * h))


@pytest.mark.parametrize("L,h,s", [(24, 2304, 2048), (96, 12288, 2048), (105, 20480, 2048)])
def test_full_recompute_flops_equal_megatron_formula(L, h, s):
    """Exact (rel 1e-12): for a GELU 4h MHA GPT our component count with full recompute is
    algebraically the Megatron-LM 2021 formula (same FLOP convention, no causal halving)."""
    fl = flops_per_token(gpt(L, h), s)
    expected = megatron_2021_flops_per_token(L, h, s, 51200)
    assert float(fl.hardware(R_FULL)) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("L,h,s", [(24, 2304, 2048), (80, 8192, 4096)])
def test_model_flops_equal_korthikanti_model_formula(L, h, s):
    """Korthikanti et al. 2022 model FLOPs (no recompute): 72 B s l h^2 (1 + s/6h + V/12lh)."""
    fl = flops_per_token(gpt(L, h), s)
    expected = 72 * L * h**2 * (1 + s / (6 * h) + 51200 / (12 * L * h))
    assert float(fl.model) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("name", ["llama3-8b", "llama3-70b", "llama3-405b", "gpt3-175b"])
def test_model_flops_match_palm_6n_plus_attention(catalog, name):
    """PaLM appendix B: 6N + 12 L H Q T, N = parameters minus the input embedding. Tolerance
    0.1%: our count leaves out norm weights (2h per layer), which 6N includes."""
    m = catalog.model(name)
    s = 4096
    n = m.total_params() - m.vocab * m.hidden * (0 if m.tied_embeddings else 1)
    palm = 6 * n + 12 * m.layers * m.heads * m.d_head * s
    assert float(flops_per_token(m, s).model) == pytest.approx(palm, rel=1e-3)


def test_moe_counts_only_active_experts(catalog):
    """Mixtral 8x7B: 6 x active params (~12.9B of 46.7B; Jiang et al. 2024 Table 1 says 13B)
    within 0.5%, the attention term excluded; a dense count of all experts would be ~3.6x more."""
    m = catalog.model("mixtral-8x7b")
    fl = flops_per_token(m, 1)
    no_attn = float(fl.model - fl.attention)
    active_matmul = m.active_params() - m.vocab * m.hidden - m.layers * 2 * m.hidden - m.hidden
    assert no_attn == pytest.approx(6 * active_matmul, rel=5e-3)
    assert 12.5e9 < m.active_params() < 13.5e9


def test_recompute_extra_is_attention_core_or_whole_forward():
    fl = flops_per_token(gpt(24, 2048), 2048)
    assert float(fl.recompute_extra(R_NONE)) == 0
    # selective: the forward of QK^T and AV, 4 L h s (Korthikanti et al. 2022, section 5)
    assert float(fl.recompute_extra(R_SELECTIVE)) == pytest.approx(4 * 24 * 2048 * 2048)
    assert float(fl.recompute_extra(R_FULL)) == pytest.approx(float(fl.model - fl.lm_head) / 3)
    assert float(fl.hardware(R_FULL)) > float(fl.hardware(R_SELECTIVE)) > float(fl.model)


def test_components_sum_to_model_and_broadcast_over_seq_len():
    fl = flops_per_token(gpt(12, 768), np.array([512, 1024, 2048]))
    total = fl.qkv + fl.attention + fl.out_proj + fl.mlp + fl.router + fl.lm_head
    np.testing.assert_allclose(fl.model, total)
    assert fl.model.shape == (3,) and np.all(np.diff(fl.model) > 0)


EFF = Efficiency(matmul_max=0.7, half_dim=300.0, fp8_ratio=0.8, memory_fraction=0.7)


@settings(max_examples=50, deadline=None)
@given(st.floats(16, 65536), st.floats(16, 65536))
def test_matmul_efficiency_saturates_monotonically(d1, d2):
    """Wider per-GPU GEMMs are never less efficient, and never exceed matmul_max."""
    lo, hi = sorted((d1, d2))
    e_lo, e_hi = (float(matmul_efficiency(EFF, d, BF16)) for d in (lo, hi))
    assert e_lo <= e_hi <= 0.7


def test_fp8_efficiency_and_compute_time():
    assert float(matmul_efficiency(EFF, 4096, FP8)) == pytest.approx(
        0.8 * float(matmul_efficiency(EFF, 4096, BF16)))
    # 1e15 FLOP at 1e15 FLOP/s x 0.5 = 2 s; 1e12 bytes at 2e12 B/s x 0.5 = 1 s
    assert float(compute_time(1e15, 1e15, 0.5)) == pytest.approx(2.0)
    assert float(memory_bound_time(1e12, 2e12, 0.5)) == pytest.approx(1.0)


# Qwen3-30B-A3B's MoE shape (config.json: 48 layers, all MoE; 128 experts, top-8, hidden 2048,
# expert ffn 768).
QWEN3_MOE = ModelSpec(id="q", name="q", layers=48, hidden=2048, heads=32, kv_heads=4, ffn=6144,
                      vocab=151936, mlp="swiglu", head_dim=128, experts=128,
                      experts_per_token=8, moe_ffn=768)


def test_expert_gemm_rows_and_smallest_dimension_by_hand():
    """Balanced routing: T tokens per rank x top-k x ep ranks over E experts rows per expert.
    2 x 4096 tokens on each of 8 EP ranks: 8192 * 8 * 8 / 128 = 4096 rows, so the smallest
    GEMM dimension is the expert ffn (768); at 64 tokens per rank it is the 32 rows."""
    t = np.array([8192.0, 64.0])
    assert list(expert_gemm_rows(QWEN3_MOE, t, 8)) == [4096.0, 32.0]
    assert list(expert_gemm_dim(QWEN3_MOE, t, 8)) == [768.0, 32.0]
    # one EP rank holds all 128 experts: each gets T k / E rows
    assert float(expert_gemm_rows(QWEN3_MOE, 8192.0, 1)) == 512.0


def test_moe_routing_traffic_by_hand():
    """Per token, forward: permute (read + write k h), unpermute (read k h, write h), and the
    chunk sort before and after the experts (2 x read + write k h) only when ep > 1 and a rank
    holds several experts."""
    k, h = 8, 2048
    assert float(moe_routing_elems_per_token(QWEN3_MOE, 1)) == 3 * k * h + h
    assert float(moe_routing_elems_per_token(QWEN3_MOE, 8)) == 7 * k * h + h
    assert float(moe_routing_elems_per_token(QWEN3_MOE, 128)) == 3 * k * h + h  # 1 per rank
    dense = ModelSpec(id="d", name="d", layers=48, hidden=2048, heads=32, kv_heads=4,
                      ffn=6144, vocab=151936, mlp="swiglu", head_dim=128)
    extra = (elementwise_bytes_per_token_layer(QWEN3_MOE, 2.0, 8)
             - elementwise_bytes_per_token_layer(dense, 2.0))
    # the MoE activation runs on k x 768 = 6144 = the dense ffn, so only routing differs
    assert float(extra) == pytest.approx(
        FWD_BWD * ((7 * k * h + h) * 2.0 + ROUTER_BYTES_PER_EXPERT * 128), rel=1e-12)


def test_narrow_expert_gemms_are_less_efficient_with_a_positive_half_dim():
    """Through the shared saturating curve, fewer rows per expert never raise the efficiency."""
    dims = expert_gemm_dim(QWEN3_MOE, np.array([256.0, 2048.0, 8192.0]), 8)
    eff = matmul_efficiency(EFF, dims, BF16)
    assert np.all(np.diff(eff) >= 0) and float(eff[0]) < float(eff[-1])
