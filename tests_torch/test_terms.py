"""Memory terms of #11 and #15 against PyTorch on CPU, one term at a time
(`gpuplan.calibrate.torch_terms`; `python -m gpuplan.calibrate.torch_terms` prints them).

Tolerances and why (the issue asks for 1%; reached figures in brackets):
- weights, gradients + accumulation buffer, base and adapter weights, adapter gradients:
  exact tensor accounting, 0.1% allowed for Megatron's buffer padding (the end of the grad
  buffer rounded to lcm(dp, 128) elements, each parameter to 64) [0.000%];
- optimizer state: 0.1%, for AdamW's 4-byte `step` counter per tensor, which the estimate
  leaves out [-0.06% on rank-8 adapters];
- NF4 base: 0.5%, for each quantized matrix's lookup tables and mean (1,092 B per matrix, not
  per parameter) [-0.12%]; the packed values and scales match the estimate's 4.127 bits exactly;
- LoRA activations against the PEFT formula below: 1%, for the RMSNorm statistics (s*b fp32
  per norm) and the bf16 copies autocast makes of A and B (per micro-batch, not per token)
  [0.07% to 0.69%]; the estimate against the measurement, the same 1% [-0.69% to -0.07%].
"""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from gpuplan.calibrate import torch_terms as tt  # noqa: E402
from gpuplan.calibrate.memory import HarnessConfig  # noqa: E402

STATE_TOL = 1e-3
NF4_TOL = 5e-3
ACT_TOL = 1e-2

BUFFER_CASES = [("megatron", 1, 1), ("megatron", 4, 1), ("torchtitan", 1, 1),
                ("torchtitan", 4, 1), ("fsdp", 4, 1), ("deepspeed", 1, 1), ("nemo", 2, 1),
                ("megatron", 2, 4), ("megatron", 1, 8)]


@pytest.mark.parametrize(("stack", "m", "dp"), BUFFER_CASES)
def test_gradient_buffers_and_distributed_optimizer(stack, m, dp):
    """The accumulation buffer in the stack's reduce dtype (Megatron/NeMo: fp32 main_grad
    every step; torchtitan: fp32 when accumulating; FSDP/DeepSpeed: bf16 .grad) and, with
    dp > 1, Megatron's distributed optimizer on its most loaded rank: 6 + 12/dp B/param."""
    for t in tt.buffer_terms(stack, m, dp):
        assert abs(t.error) < STATE_TOL, (t.check, t.term, t.error)


def test_fp32_accumulation_doubles_the_gradient_bytes():
    """The measurement itself: an fp32 buffer is 4 B/param, bf16 gradients 2 B/param."""
    grads = {s: next(t.measured for t in tt.buffer_terms(s, 4) if t.term.startswith("grad"))
             for s in ("megatron", "fsdp")}
    assert grads["megatron"] == 2 * grads["fsdp"]


@pytest.mark.parametrize("targets", ["attn", "mlp", "all"])
def test_lora_model_state(targets):
    """Frozen bf16 base, fp32 adapters, their gradients and AdamW moments."""
    for t in tt.lora_terms(8, targets):
        if t.term != "activations":
            tol = STATE_TOL
            assert abs(t.error) < tol, (t.check, t.term, t.error)


def peft_saved_bytes(cfg: HarnessConfig, r: int, targets: str, autocast: bool) -> float:
    """What PEFT-style LoRA layers save for backward (SwiGLU, flash attention, no recompute).

    A frozen matmul saves no input (its weight gradient is not needed), so the QKV input, the
    MLP input and the down-projection input are not kept by the base. Each adapter saves its
    own copy of its input cast to the adapter's dtype (bf16 under autocast: 2 B; fp32
    otherwise: 4 B) and x A (2 or 4 B * r). Kept by the base: the two norm inputs, Q and the
    attention output, compact K and V (2 B each), fp32 log-sum-exp, and the SwiGLU gate input,
    its silu output and the up-projection output. Nothing is saved in front of the first
    adapter (nothing there needs a gradient): the first layer's first norm input, and with
    MLP targets alone the first layer's whole attention block and its second norm input.
    """
    spec = cfg.model_spec()
    h, q, kv, f = spec.hidden, spec.heads * spec.d_head, spec.kv_heads * spec.d_head, spec.ffn
    c = 2 if autocast else 4
    d_in = {"attn": 3 * h + q, "mlp": 2 * h + f}
    n = {"attn": 4, "mlp": 3}
    tgt = ("attn", "mlp") if targets == "all" else (targets,)
    per_token = (2 * (2 * h + 2 * q + 2 * kv + 3 * f) + 4 * spec.heads
                 + sum(c * (d_in[t] + n[t] * r) for t in tgt))
    tokens = cfg.seq_len * cfg.micro_batch
    first = 2 * h if "attn" in tgt else 2 * (2 * h + 2 * q + 2 * kv) + 4 * spec.heads
    return (spec.layers * per_token - first) * tokens


@pytest.mark.parametrize("autocast", [True, False])
@pytest.mark.parametrize("targets", ["attn", "mlp", "all"])
def test_lora_activations_follow_peft_formula(targets, autocast):
    m = tt.lora_measure(tt.LORA_CFG, 8, targets, autocast)["activations"]
    ref = peft_saved_bytes(tt.LORA_CFG, 8, targets, autocast)
    assert abs(ref / m - 1) < ACT_TOL, (ref, m)


# Formerly strict xfails (LORA_GAPS, predicted / measured - 1 of main at a60d6b2): attn
# autocast -0.144, mlp autocast +0.085, all autocast -0.158, all no-autocast -0.399; fixed by
# finetune.lora_activation_delta and front_bytes (#15) to [-0.69%, -0.07%].
@pytest.mark.parametrize("autocast", [True, False])
@pytest.mark.parametrize("targets", ["attn", "mlp", "all"])
def test_lora_activations_estimate(targets, autocast):
    """The estimate's layer activations against the measured saved tensors: PEFT-style
    adapters (stack adapter_input 'autocast', or 'adapter' without autocast); 1% for the
    RMSNorm statistics and autocast's copies of A and B, which it leaves out."""
    t = next(t for t in tt.lora_terms(8, targets, autocast) if t.term == "activations")
    assert abs(t.error) < ACT_TOL, t.error


def test_lora_terms_refuse_recompute():
    with pytest.raises(tt.ConfigError, match="checkpoint='none'"):
        tt.lora_terms(8, "all", cfg=replace(tt.LORA_CFG, checkpoint="full"))


def test_hand_written_adapter_saves_what_peft_saves():
    """`torch_model.LoRALinear` against PEFT's own LoRA layers (when PEFT is installed): the
    same bytes of every model-state part and of every region's saved tensors."""
    pytest.importorskip("peft")
    for targets, autocast in (("all", True), ("attn", False)):
        own = tt.lora_measure(tt.LORA_CFG, 8, targets, autocast)
        peft = tt.lora_measure(tt.LORA_CFG, 8, targets, autocast, peft=True)
        assert own == peft


def test_nf4_base_weights():
    """QLoRA's NF4 base (bitsandbytes when installed, else the same layout's arithmetic)."""
    (t,) = tt.nf4_terms()
    assert abs(t.error) < NF4_TOL, t.error


def test_bitsandbytes_nf4_layout_is_nf4_bytes():
    """bitsandbytes' quantize_4bit keeps exactly `nf4_bytes(n)` for each matrix shape."""
    pytest.importorskip("bitsandbytes")
    for shape in ((1024, 1024), (256, 1024), (2816, 1024), (100, 64)):
        w = torch.randn(*shape, dtype=torch.bfloat16)
        assert tt._quantized_bytes(w) == tt.nf4_bytes(w.numel()), shape


def test_cli_prints_every_term(capsys):
    assert tt.main([]) == 0
    out = capsys.readouterr().out
    assert "dist-opt dp=4" in out and "qlora nf4" in out and out.count("activations") >= 4


def test_qlora_saves_what_lora_saves():
    """With a bitsandbytes NF4 base (CPU), the layers save exactly what a bf16 base with the
    same adapters saves: MatMul4Bit keeps only the packed weight and dequantizes it again in
    backward, so the 16-bit copy is a transient, not a saved activation (the estimate counts
    it in the working set, `finetune.dequant_bytes`)."""
    pytest.importorskip("bitsandbytes")
    qlora = tt.lora_measure(tt.LORA_CFG, 8, "all", True, nf4=True)
    lora = tt.lora_measure(tt.LORA_CFG, 8, "all", True)
    assert qlora["activations"] == lora["activations"]
    assert qlora["head_activations"] == lora["head_activations"]
