"""Fine-tuning physics by software stack (#15): torchtune's chunked loss and bf16 adapters,
offload bits of a frozen base, inputs of unadapted frozen matrices, the evaluation share of an
MLPerf run. Each is checked against a hand count of the bytes or FLOPs it stands for."""

from __future__ import annotations

import pytest

from gpuplan.estimators import finetune as ftm
from gpuplan.estimators.compute import flops_per_token
from gpuplan.estimators.memory import memory_breakdown
from gpuplan.spec import R_FULL, R_NONE, STACKS, Layout, offload_code
from gpuplan.workload import finetune_spec, with_finetune

OVERHEAD = dict(runtime_overhead_bytes=2.0**30, fragmentation=0.05)
REL = 1e-9  # float round-off only
TORCHTUNE, FSDP = STACKS.index("torchtune"), STACKS.index("fsdp")


@pytest.fixture(scope="module")
def llama8b(cat):
    return cat.model("llama3-8b")


def tuned(model, method, **kw):
    return with_finetune(model, finetune_spec(model, method=method, **kw))


def _mem(model, stacks, **kw):
    return memory_breakdown(model, Layout(**kw), stacks=stacks, **OVERHEAD)


def test_torchtune_keeps_bf16_logits_and_one_fp32_chunk(llama8b, stacks):
    """torchtune's CEWithChunkedOutputLoss (8 chunks, compiled): the bf16 logits of every chunk,
    one chunk's fp32 working tensor, and the final norm's and LM head's bf16 inputs."""
    sb, V, h = 2 * 2048, 128256, 4096
    expected = 2 * sb * V + 4 * sb * V / 8 + 2 * (2 * sb * h)
    bd = _mem(tuned(llama8b, "lora"), stacks, seq_len=2048, micro_batch=2, global_batch=2,
              recompute=R_FULL, stack=TORCHTUNE)
    assert float(bd.logits) == pytest.approx(expected, rel=REL)
    # the fsdp stack's unchunked loss: + the saved fp32 log-softmax and one fp32 copy
    fsdp = _mem(tuned(llama8b, "lora"), stacks, seq_len=2048, micro_batch=2, global_batch=2,
                recompute=R_FULL, stack=FSDP)
    assert float(fsdp.logits) == pytest.approx(expected - 4 * sb * V / 8 + 2 * 4 * sb * V,
                                               rel=REL)


def test_torchtune_adapters_take_the_model_dtype(llama8b, stacks):
    """torchtune: bf16 adapter weights (2 B), gradients (2 B) and AdamW moments (4 B); PEFT's
    fp32 adapters (the fsdp stack) take twice as much."""
    m = tuned(llama8b, "lora")
    n = ftm.adapter_params(llama8b, m.finetune)
    tt = _mem(m, stacks, seq_len=2048, stack=TORCHTUNE)
    assert float(tt.adapter_weights) == pytest.approx(2 * n, rel=REL)
    assert float(tt.gradients) == pytest.approx(2 * n, rel=REL)
    assert float(tt.adapter_optimizer) == pytest.approx(4 * n, rel=REL)
    assert float(_mem(m, stacks, seq_len=2048, stack=FSDP).adapter_optimizer) == \
        pytest.approx(8 * n, rel=REL)


def test_only_the_optimizer_bit_offloads_the_adapter_optimizer(llama8b, stacks):
    m = tuned(llama8b, "lora")
    acts = _mem(m, stacks, seq_len=2048, offload=offload_code("activations"))
    opt = _mem(m, stacks, seq_len=2048, offload=offload_code("optimizer"))
    assert float(acts.adapter_optimizer) > 0 and float(opt.adapter_optimizer) == 0


def test_fsdp_cpu_offload_moves_the_frozen_shards_to_the_host(llama8b, stacks):
    """Offload params under ZeRO-3 (FSDP's CPUOffload): no base or adapter shard on the GPU,
    only the gathered layers; the bytes reappear in `offloaded`."""
    m = tuned(llama8b, "qlora")
    kw = dict(seq_len=2048, dp=2, zero=3, global_batch=2, recompute=R_FULL)
    on = _mem(m, stacks, offload=offload_code("optimizer,params,grads"), **kw)
    off = _mem(m, stacks, **kw)
    assert float(on.weights) == 0 and float(on.gradients) == 0
    assert float(on.gathered) == pytest.approx(float(off.gathered), rel=REL)
    state = float(off.weights + off.gradients + off.optimizer)
    assert float(on.offloaded) == pytest.approx(state, rel=REL)


def test_attention_only_lora_drops_the_mlp_inputs(llama8b, stacks):
    """Without recompute, LoRA on attention only does not keep the MLP's input (e*s*b*h) and
    the down projection's input (e*s*b*ffn) of any layer (no weight gradient needs them), and
    has 3 fewer adapter intermediates (e*s*b*r each) than LoRA on every matrix."""
    sb, h, ffn, r, layers = 2048, 4096, 14336, 16, 32
    kw = dict(seq_len=2048, recompute=R_NONE)
    attn = _mem(tuned(llama8b, "lora", lora_targets="attn"), stacks, **kw)
    every = _mem(tuned(llama8b, "lora", lora_targets="all"), stacks, **kw)
    drop = layers * 2 * sb * (h + ffn + 3 * r)
    assert float(every.activations - attn.activations) == pytest.approx(drop, rel=1e-6)


def test_evaluation_share_matches_the_mlperf_log(cat):
    """A forward pass over a LoRA step's hardware FLOPs: (2N + attn/3) / (4N + 2attn/3 +
    6 adapters), 0.47 for Llama 2 70B at 8,192 tokens. NVIDIA's MLPerf v4.0 DGX H100 log:
    37.3 s per evaluation of 173 sequences against 0.464 s per trained one, 0.465 (within 3%:
    the log's times also hold the loss, the optimizer and communication)."""
    m = cat.model("llama2-70b")
    ft = finetune_spec(m, method="lora", lora_rank=16, lora_targets="attn")
    fl = flops_per_token(with_finetune(m, ft), 8192)
    share = float(ftm.forward_share(m, ft, model_flops=fl.model, attention=fl.attention,
                                    lm_head=fl.lm_head, recompute_extra=fl.recompute_extra(0)))
    assert share == pytest.approx(0.465, rel=0.03)
