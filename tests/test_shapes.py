"""estimators/shapes.py: the one definition of parameters per GPU and the other derived sizes that
memory and timing share (#9)."""

from __future__ import annotations

import numpy as np
import pytest

from gpuplan.estimators import shapes
from gpuplan.estimators.compute import Efficiency
from gpuplan.estimators.memory import stage_breakdowns
from gpuplan.estimators.timing import step_time
from gpuplan.spec import Hardware, Layout, ModelSpec

DENSE = ModelSpec(id="d", name="d", layers=8, hidden=512, heads=8, kv_heads=2, ffn=2048,
                  vocab=32000, mlp="swiglu")
TIED = ModelSpec(id="t", name="t", layers=8, hidden=512, heads=8, kv_heads=8, ffn=2048,
                 vocab=32000, tied_embeddings=True)
MOE = ModelSpec(id="e", name="e", layers=8, hidden=512, heads=8, kv_heads=8, ffn=2048,
                vocab=32000, mlp="swiglu", experts=8, experts_per_token=2, dense_layers=1)


@pytest.mark.parametrize("model", [DENSE, TIED, MOE], ids=lambda m: m.id)
def test_one_stage_holds_every_parameter_once(model):
    first, last = shapes.stages(model, 1, 1, 1)
    assert float(first.total) == float(last.total) == model.total_params()


@pytest.mark.parametrize("model", [DENSE, TIED], ids=lambda m: m.id)
def test_megatron_placement_embedding_first_head_last(model):
    """pp > 1: the first stage holds the input embedding, the last the final norm and the LM
    head; a tied embedding is counted once on each of the two stages that hold it."""
    tp, pp = 2, 4
    first, last = shapes.stages(model, tp, pp, 1)
    emb = model.vocab * model.hidden / tp
    assert float(first.root) == emb
    assert float(last.root) == emb + model.hidden
    assert float(last.total - first.total) == model.hidden  # the final norm
    assert float(shapes.params_per_gpu(model, tp, pp, 1)) == float(last.total)


def test_kv_width_splits_then_replicates():
    assert float(shapes.kv_width_per_rank(DENSE, 1)) == 2 * DENSE.d_head
    assert float(shapes.kv_width_per_rank(DENSE, 2)) == DENSE.d_head
    assert float(shapes.kv_width_per_rank(DENSE, 8)) == DENSE.d_head  # one replicated head


def test_activation_sizes():
    assert shapes.act_element_bytes(np.array([0, 1, 2, 3])).tolist() == [4, 2, 2, 2]
    b = shapes.hidden_activation_bytes(DENSE, seq_len=4096, micro_batch=2, cp=4, precision=2)
    assert float(b) == 2 * 4096 * 2 / 4 * 512


def _hw() -> Hardware:
    return Hardware(memory_bytes=80e9, memory_bandwidth_bytes_per_s=3e12, peak_flops=1e15,
                    scale_up_bytes_per_s=4e11, scale_up_latency_s=1e-6, scale_up_domain=8,
                    scale_out_bytes_per_s=5e10, scale_out_latency_s=5e-6, gpus_per_node=8,
                    tdp_watts=700)


@pytest.mark.parametrize("model", [DENSE, MOE], ids=lambda m: m.id)
@pytest.mark.parametrize("zero", [0, 1, 3])
def test_memory_and_timing_count_the_same_optimizer_parameters(model, zero):
    """The optimizer step time streams OPTIMIZER_STEP_BYTES per parameter whose state this GPU
    holds; the memory model holds 12 B (AdamW, mixed) for the same parameters. Both come from
    shapes.sharded_params, so the counts agree (to float round-off, 1e-12)."""
    from gpuplan.estimators.compute import ADAMW_STEP_BYTES_PER_PARAM

    lay = Layout(tp=2, pp=2, dp=4, cp=2, ep=2 if model.is_moe else 1, zero=zero,
                 global_batch=8, seq_len=1024)
    stages_mem = stage_breakdowns(model, lay, runtime_overhead_bytes=0.0, fragmentation=0.0)
    eff = Efficiency(matmul_max=0.5, half_dim=0.0, fp8_ratio=1.0, memory_fraction=0.5)
    t = step_time(model, lay, _hw(), eff)
    timed = float(t.optimizer_s) * 3e12 * 0.5 / ADAMW_STEP_BYTES_PER_PARAM
    first, last = shapes.stages(model, 2, 2, lay.ep)
    held = max(float(shapes.sharded_params(P, 4, 2, lay.ep, zero >= 1)) for P in (first, last))
    assert timed == pytest.approx(held, rel=1e-12)
    assert max(float(m.optimizer) for m in stages_mem) / 12 == pytest.approx(held, rel=1e-12)
