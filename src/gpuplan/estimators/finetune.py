"""Fine-tuning: LoRA, QLoRA and freezing, in bytes and FLOPs (L3, pure numpy; #15).

Not an estimator of its own: `memory` and `timing` call it when the model carries a
`workload.FineTune` whose method is not 'full' (full training keeps today's accounting).
It returns bytes, parameter counts and ratios, never seconds.

Sources and conventions (each repeated beside its function):

- LoRA (Hu et al. 2021, arXiv 2106.09685, section 4.1): a frozen d_in x d_out matrix W gets
  B A with A: d_in x r, B: r x d_out, so r * (d_in + d_out) trainable parameters per target
  matrix. Targets 'attn' = q, k, v, o projections; 'mlp' = the MLP matrices (gate, up, down for
  SwiGLU; every routed and shared expert's in MoE layers); 'all' = both (QLoRA's choice,
  Dettmers et al. 2023, arXiv 2305.14314, section 4). Llama 3 8B, rank 16, all: 41,943,040.
- Adapter state: PEFT keeps adapter weights in fp32 (`autocast_adapter_dtype=True`, PEFT's
  default), so weights 4 B + gradients 4 B + AdamW moments 8 B = 16 B per adapter parameter
  (SGD with momentum: 4 B; Adafactor taken as 4 B). A stack whose [memory.STACK] row says
  `adapter_dtype = "bf16"` (torchtune: the adapters take the model's dtype, and AdamW its
  moments in the parameters' dtype) halves each: 2 + 2 + 4 B. The frozen base has no
  gradients and no optimizer state.
- Frozen base storage: bf16/fp16 2 B (fp32 4 B) per parameter; NF4 with double quantization
  (QLoRA, section 3): 4 bits + 64-element blocks with 8-bit scales + one fp32 scale per 256
  blocks = 4 + 8/64 + 32/(64*256) = 4.127 bits; LLM.int8 (Dettmers et al. 2022, arXiv
  2208.07339): 1 B plus one fp32 scale per row (counted as 1 B); fp8: 1 B with a per-tensor
  scale. Only the transformer layers' matrices are quantized: bitsandbytes leaves embeddings,
  norms and the LM head in 16 bits (transformers' `llm_int8_skip_modules` keeps lm_head).
- ZeRO/FSDP over a frozen base: stage 3 shards the base weights and gathers them layer by
  layer (at their storage size); stages 1/2 shard only the adapters' optimizer state/gradients.
- Activations: LoRA keeps every activation the base keeps (the adapters need each target's
  input, the frozen path needs the activation gradients) plus each adapter's rank-r
  intermediate x A (s*b*r elements per target), less the inputs that only an unadapted frozen
  matrix's weight gradient would need (`untargeted_input_bytes`); under full recompute both
  change the recomputed layer, not the stored layer inputs; QLoRA adds the dequantized 16-bit
  copy of the largest matrix of a layer, alive while it is multiplied (bitsandbytes
  dequantizes one weight at a time). Method 'freeze' keeps activations only for the trainable
  layers (nothing below them needs a gradient).
- Paged optimizer (bitsandbytes, QLoRA section 3): the adapters' optimizer state pages to CPU
  memory only under memory pressure, so it is counted on the GPU (the conservative choice).
- FLOPs: the forward is 2 N per token; the backward of a frozen matrix computes only the
  activation gradient (2 N), not the weight gradient (2 N), so LoRA costs about 4 N instead of
  6 N, plus 6 x the adapter parameters. 'freeze' runs the forward through every layer and the
  backward only through the trainable layers (and the LM head's activation gradient).
- Dequantization: a quantized base is dequantized before each GEMM. Google Cloud's Vertex AI
  LoRA/QLoRA recommendations (https://cloud.google.com/vertex-ai/docs/model-garden/lora-qlora):
  "LoRA is about 66% faster than QLoRA in terms of tuning speed", so the compute of a 4-bit
  (and, for want of a source of its own, an 8-bit) base takes 1.66 x as long (QUANT_SLOWDOWN).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..spec import O_GRADS, O_OPTIMIZER, O_PARAMS, R_FULL, ModelSpec
from ..workload import FineTune
from .shapes import StageParams, act_element_bytes, sharded_params, tokens_per_rank

__all__ = [
    "ADAPTER_STATE_B",
    "QUANT_BYTES",
    "QUANT_SLOWDOWN",
    "adapter_input_bytes",
    "adapter_params",
    "adapter_params_per_layer",
    "base_bytes_per_param",
    "flops_ratios",
    "forward_share",
    "front_bytes",
    "lora_activation_delta",
    "stage_state",
    "target_matrices",
    "trainable_layers_on_stage",
    "trainable_params",
]

# Bytes per frozen parameter by --quant (None: the training precision's weight size).
NF4_BITS = 4.0 + 8.0 / 64 + 32.0 / (64 * 256)  # QLoRA section 3: 0.127 bits of scales
QUANT_BYTES = {"nf4": NF4_BITS / 8, "int8": 1.0, "fp8": 1.0}
# Adapter weights (fp32, PEFT's autocast_adapter_dtype), gradients (fp32), optimizer state by
# optimizer code (AdamW m + v, SGD momentum, Adafactor taken as one buffer).
ADAPTER_STATE_B = {"weights": 4.0, "gradients": 4.0}
ADAPTER_OPT_B = np.array([8.0, 4.0, 4.0])
# Compute-time factor of a quantized base (Vertex AI: LoRA ~66% faster than QLoRA).
QUANT_SLOWDOWN = {"nf4": 1.66, "int8": 1.66, "fp8": 1.0, "none": 1.0}


# --- parameter counts --------------------------------------------------------------------------
def target_matrices(model: ModelSpec, targets: str, moe: bool = False) -> list[tuple[int, int]]:
    """(d_in, d_out) of every matrix of one layer that LoRA adapts under `targets`."""
    h, q = model.hidden, model.heads * model.d_head
    kv = model.kv_heads * model.d_head
    if model.is_mla:  # MLA: its projections taken as four h x q matrices (an approximation)
        kv = q
    out: list[tuple[int, int]] = []
    if targets in ("attn", "all"):
        out += [(h, q), (h, kv), (h, kv), (q, h)]
    if targets in ("mlp", "all"):
        ffn = model.expert_ffn if moe else model.ffn
        n = (model.experts + model.shared_experts) if moe else 1
        # gate and up project h -> ffn, down ffn -> h; a plain MLP has up and down
        out += [(h, ffn), (ffn, h)] * n + ([(h, ffn)] * n if model.mlp == "swiglu" else [])
    return out


def adapter_params_per_layer(model: ModelSpec, ft: FineTune, moe: bool = False) -> int:
    """r * (d_in + d_out) summed over one layer's target matrices (Hu et al. 2021)."""
    return ft.lora_rank * sum(a + b for a, b in target_matrices(model, ft.lora_targets, moe))


def adapter_params(model: ModelSpec, ft: FineTune) -> int:
    """Adapter parameters of the whole model (0 unless LoRA or QLoRA)."""
    if not ft.adapters:
        return 0
    dense = model.layers - model.moe_layers
    return (dense * adapter_params_per_layer(model, ft)
            + model.moe_layers * adapter_params_per_layer(model, ft, moe=True))


def trainable_params(model: ModelSpec, ft: FineTune) -> int:
    """Parameters that get gradients: adapters, the last layers (freeze), or all (full)."""
    if ft.adapters:
        return adapter_params(model, ft)
    if ft.method == "freeze":
        k = min(ft.trainable_layers, model.layers)
        moe_last = min(k, model.moe_layers)  # MoE layers come last
        return (k - moe_last) * model.layer_params(False) + moe_last * model.layer_params(True)
    return model.total_params()


def base_bytes_per_param(ft: FineTune, weight_b: Any) -> Any:
    """Bytes per frozen matrix parameter: the --quant storage, or the training weight size."""
    return QUANT_BYTES.get(ft.quant, weight_b)


# --- memory ----------------------------------------------------------------------------------
def trainable_layers_on_stage(model: ModelSpec, ft: FineTune, P: StageParams, pp: Any,
                              first: bool) -> Any:
    """Layers of this stage that keep activations: all of them for LoRA/QLoRA; for 'freeze'
    those among the last `trainable_layers` of the model (on the first stage of a pipeline,
    the ones past layer L - k)."""
    on_stage = np.asarray(P.dense_layers + P.moe_layers, dtype=float)
    if ft.method != "freeze":
        return on_stage
    k = float(min(ft.trainable_layers, model.layers))
    last = np.minimum(k, on_stage)
    if not first:
        return last
    return np.where(np.asarray(pp) == 1, last, np.clip(on_stage - (model.layers - k), 0, k))


def _matrix_share(model: ModelSpec, P: StageParams) -> Any:
    """Parameters of this stage's layer matrices (everything but the root and the norms)."""
    layers = np.asarray(P.dense_layers + P.moe_layers, dtype=float)
    return np.maximum(P.total - P.root - layers * model.norm_params_per_layer(), 0.0)


def _stage_adapters(model: ModelSpec, ft: FineTune, P: StageParams, tp: Any, ep: Any) -> Any:
    """Adapter parameters per GPU of stage P: split by tp like their matrices (and routed
    experts' adapters by ep)."""
    if not ft.adapters:
        return 0.0
    dense = adapter_params_per_layer(model, ft)
    moe: Any = adapter_params_per_layer(model, ft, moe=True)  # an array once split by ep
    if model.is_moe and ft.lora_targets in ("mlp", "all"):
        routed = model.experts * ft.lora_rank * model.mlp_matrices \
            * (model.hidden + model.expert_ffn)
        moe = moe - routed + routed / np.asarray(ep, dtype=float)
    return (P.dense_layers * dense + P.moe_layers * moe) / np.asarray(tp, dtype=float)


def stage_state(model: ModelSpec, ft: FineTune, P: StageParams, L: Any, *, wb: Any, gb: Any,
                ob: Any, first: bool, adapter_scale: Any = 1.0) -> dict[str, Any]:
    """The model-state parts of `memory.MemoryBreakdown` for one stage's GPU, fine-tuning.

    LoRA/QLoRA: base = matrices at base_bytes_per_param + root and norms at the weight size,
    sharded over dp*cp by ZeRO-3; adapters at 4 B weights (ZeRO-3), 4 B gradients (ZeRO-2),
    optimizer bytes (ZeRO-1). freeze: the trainable layers keep the full model state (wb, gb, ob
    as for full training), the rest the weights only. `adapter_*` hold the trainable part.
    Offload (Layout.offload bits): the optimizer state; under ZeRO-3 the parameter shards (base
    and adapters; FSDP's CPUOffload), under ZeRO-2/3 the gradient shards, as for full training.
    """
    zero = np.asarray(L.zero)
    half = np.asarray(adapter_scale, dtype=float)  # 1 (fp32 adapters) or 0.5 (bf16)
    share = lambda on: sharded_params(P, L.dp, L.cp, L.ep, on) / np.maximum(P.total, 1e-30)  # noqa: E731
    s3, s2, s1 = share(zero >= 3), share(zero >= 2), share(zero >= 1)
    group_gt1 = np.asarray(L.dp) * np.asarray(L.cp) > 1
    gather = (zero >= 3) & group_gt1
    matrices = _matrix_share(model, P)
    if ft.adapters:
        base = base_bytes_per_param(ft, wb) * matrices + wb * (P.total - matrices)
        n = _stage_adapters(model, ft, P, L.tp, L.ep)
        aw, ag = ADAPTER_STATE_B["weights"] * half * n, ADAPTER_STATE_B["gradients"] * half * n
        ao = ADAPTER_OPT_B[np.asarray(L.optimizer, dtype=np.intp)] * half * n
        unit_b = base_bytes_per_param(ft, wb) * P.unit
    else:  # freeze: the trainable layers are whole layers of the stage
        layers = np.maximum(np.asarray(P.dense_layers + P.moe_layers, dtype=float), 1e-30)
        t = trainable_layers_on_stage(model, ft, P, L.pp, first) / layers
        trained = t * (P.total - P.root)
        base = wb * (P.total - trained)
        aw, ag, ao = wb * trained, gb * trained, ob * trained
        unit_b = wb * P.unit
    bits = np.asarray(L.offload).astype(np.int64)
    offload = (bits & O_OPTIMIZER) != 0
    params = ((bits & O_PARAMS) != 0) & (zero >= 3)  # FSDP CPUOffload: the shards on the host
    grads = ((bits & O_GRADS) != 0) & (zero >= 2)
    ao_gpu = np.where(offload, 0.0, ao * s1)
    base_gpu, aw_gpu = np.where(params, 0.0, base * s3), np.where(params, 0.0, aw * s3)
    return dict(
        weights=base_gpu + aw_gpu, gradients=np.where(grads, 0.0, ag * s2), optimizer=ao_gpu,
        offloaded=np.where(offload, ao * s1, 0.0) + np.where(params, (base + aw) * s3, 0.0)
        + np.where(grads, ag * s2, 0.0),
        gathered=np.where(gather, np.minimum(2.0, P.dense_layers + P.moe_layers) * unit_b
                          + wb * P.root, 0.0),
        grad_bucket=np.zeros_like(base_gpu), grad_accum=np.zeros_like(base_gpu),
        zero3_saving=np.where(gather, base + aw - base_gpu - aw_gpu, 0.0),
        base_weights=base_gpu, adapter_weights=aw_gpu, adapter_optimizer=ao_gpu + 0.0 * base,
        tuned=np.ones_like(base_gpu, dtype=bool))


def stage_parts(model: ModelSpec, ft: FineTune, P: StageParams, L: Any, state_b: Any,
                stored: Any, transient: Any, first: bool, sb: dict[str, Any] | None = None
                ) -> tuple[dict[str, Any], Any, Any]:
    """Model state, stored and transient activations of a fine-tuned stage (memory.py calls it):
    the frozen base and adapters (`stage_state`), the activations of the layers that need
    gradients plus the adapters' intermediates, and QLoRA's dequantized matrix. `sb`: the
    stack's buffers (`buffers.StackBuffers.pick`), for its adapter dtype."""
    wb, gb, ob = state_b
    scale = (sb or {}).get("adapter_bytes", 4.0) / ADAPTER_STATE_B["weights"]
    d = stage_state(model, ft, P, L, wb=wb, gb=gb, ob=ob, first=first, adapter_scale=scale)
    layers = np.maximum(np.asarray(P.dense_layers + P.moe_layers, dtype=float), 1e-30)
    keep = trainable_layers_on_stage(model, ft, P, L.pp, first)
    # per layer: the adapters' saved inputs and intermediates in, the frozen matrices' inputs
    # out; full recompute keeps only each layer's input, so both change the recomputed layer
    delta = lora_activation_delta(model, ft, L, sb)
    full = np.asarray(L.recompute) == R_FULL
    # the embedding's stage (memory.py also passes the one stage of pp = 1 as a later one)
    front = np.where(first | (np.asarray(L.pp) == 1), front_bytes(model, ft, L), 0.0)
    stored = stored * keep / layers + np.where(full, 0.0, keep * delta - front)
    transient = np.maximum(transient + np.where(full, delta, 0.0), 0.0)
    return d, stored, transient + dequant_bytes(model, ft, L.tp)


def adapter_input_bytes(L: Any, sb: dict[str, Any] | None) -> Any:
    """Bytes per element of the copy of its input each adapter saves, by the stack's
    `adapter_input` (buffers.StackBuffers): 'autocast' (PEFT: the input cast to the fp32
    adapter, cast back by autocast) the activation element size; 'adapter' (PEFT without
    autocast) the adapter's own (`adapter_bytes`); 'shared' (torchtune) 0: no copy."""
    sb = sb or {}
    mode = np.asarray(sb.get("adapter_input", "autocast"))
    e = act_element_bytes(np.asarray(L.precision, dtype=np.intp))
    return np.where(mode == "autocast", e,
                    np.where(mode == "adapter", sb.get("adapter_bytes", 4.0), 0.0))


def lora_activation_delta(model: ModelSpec, ft: FineTune, L: Any,
                          sb: dict[str, Any] | None = None) -> Any:
    """Per layer and micro-batch: the saved bytes of a LoRA layer less those of the same layer
    in full training. Autograd saves a matmul's input only when its weight needs a gradient,
    so no frozen matrix keeps one: the QKV input and the MLP input (e*s*b*h each, /t with SP)
    and the down projection's input (e*s*b*ffn/t) go. Adapters that copy their input
    (`adapter_input_bytes` c > 0, PEFT) each save that copy and their rank-r intermediate:
    c*s*b*(d_in + r) per target, so q, k and v keep three copies. Adapters that share the
    frozen layer's input ('shared', torchtune) keep one storage per input, the attention
    output being flash attention's own: `untargeted_input_bytes` less, plus e*s*b*r per
    adapter (`adapter_activation_bytes`). MoE models: the shared form (expert adapters see
    only their routed tokens; not measured)."""
    if not ft.adapters:
        return 0.0
    shared = adapter_activation_bytes(model, ft, L) - untargeted_input_bytes(model, ft, L)
    if model.is_moe:
        return shared
    c = adapter_input_bytes(L, sb)
    tp = np.asarray(L.tp, dtype=float)
    t_seq = np.where(np.asarray(L.sp, bool), tp, 1.0)
    e = act_element_bytes(np.asarray(L.precision, dtype=np.intp))
    tok = tokens_per_rank(L.seq_len, L.micro_batch, L.cp)
    h, q, f = model.hidden, model.heads * model.d_head, model.ffn
    up = 2 if model.mlp == "swiglu" else 1
    # (inputs of hidden width, split by SP; inputs split by tp; adapters) per target group
    group = {"attn": (3, q, 4), "mlp": (up, f, up + 1)}
    tg = ("attn", "mlp") if ft.lora_targets == "all" else (ft.lora_targets,)
    copies = sum(group[g][0] * h / t_seq + group[g][1] / tp + group[g][2] * ft.lora_rank
                 for g in tg)
    frozen = e * tok * (2.0 * h / t_seq + f / tp)
    return np.where(c > 0, c * tok * copies - frozen, shared)


def front_bytes(model: ModelSpec, ft: FineTune, L: Any) -> Any:
    """Per micro-batch, on the stage holding the embedding: what nothing saves in front of the
    first adapter, as nothing there needs a gradient (the embedding is frozen). Attention
    targets: the first layer's first norm input, e*s*b*h (/t with SP); MLP targets alone: also
    that layer's attention block as flash attention keeps it (Q, K, V and its output, the
    fp32 log-sum-exp) and the second norm's input. 0 but for LoRA/QLoRA."""
    if not ft.adapters:
        return 0.0
    tp = np.asarray(L.tp, dtype=float)
    t_seq = np.where(np.asarray(L.sp, bool), tp, 1.0)
    e = act_element_bytes(np.asarray(L.precision, dtype=np.intp))
    tok = tokens_per_rank(L.seq_len, L.micro_batch, L.cp)
    if ft.lora_targets != "mlp":
        return e * tok * model.hidden / t_seq
    q, kv = model.heads * model.d_head, model.kv_heads * model.d_head
    if model.is_mla:
        kv = q
    return tok * (e * (2.0 * model.hidden / t_seq + (2.0 * q + 2.0 * kv) / tp)
                  + 4.0 * model.heads / tp)


def untargeted_input_bytes(model: ModelSpec, ft: FineTune, L: Any) -> Any:
    """Per dense layer and micro-batch: saved inputs that only a frozen, unadapted matrix's
    weight gradient would need, which autograd then does not keep (it saves a matmul's input
    only when the weight requires a gradient). Targets 'attn': the MLP's input (the second
    norm's output, e*s*b*h, /t with SP) and the down projection's input (e*s*b*ffn/t); 'mlp':
    the QKV input (e*s*b*h, /t with SP; the output projection's input is flash attention's
    output, which its backward keeps anyway). 0 for 'all', for 'freeze' and for MoE models
    (their expert buffers are counted as in full training)."""
    if not ft.adapters or ft.lora_targets == "all" or model.is_moe:
        return 0.0
    tp = np.asarray(L.tp, dtype=float)
    t_seq = np.where(np.asarray(L.sp, bool), tp, 1.0)
    e = act_element_bytes(np.asarray(L.precision, dtype=np.intp))
    sb = tokens_per_rank(L.seq_len, L.micro_batch, L.cp)
    if ft.lora_targets == "attn":
        return e * sb * (model.hidden / t_seq + model.ffn / tp)
    return e * sb * model.hidden / t_seq


def adapter_activation_bytes(model: ModelSpec, ft: FineTune, L: Any) -> Any:
    """Per layer and micro-batch: each adapter's saved rank-r intermediate x A, e * s*b*r."""
    if not ft.adapters:
        return 0.0
    n = len(target_matrices(model, ft.lora_targets))
    sb = tokens_per_rank(L.seq_len, L.micro_batch, L.cp)
    return act_element_bytes(np.asarray(L.precision, dtype=np.intp)) * sb * ft.lora_rank * n


def dequant_bytes(model: ModelSpec, ft: FineTune, tp: Any) -> Any:
    """QLoRA/int8: the 16-bit copy of a layer's largest matrix while it is multiplied."""
    if ft.quant in ("none",) or not ft.adapters:
        return 0.0
    largest = max(model.hidden * model.expert_ffn, model.hidden * model.heads * model.d_head)
    return 2.0 * largest / np.asarray(tp, dtype=float)


# --- compute ---------------------------------------------------------------------------------
def flops_ratios(model: ModelSpec, ft: FineTune, *, model_flops: Any, attention: Any,
                 lm_head: Any, recompute_extra: Any) -> tuple[Any, Any]:
    """(model FLOPs, hardware FLOPs) per token of the fine-tune over those of full training.

    Full: model = 6N + attention (PaLM), hardware = model + recompute. LoRA/QLoRA: the weight
    gradients of every frozen matrix ((model - attention) / 3) are not computed, the adapters
    add 6 x their parameters. freeze: the forward (model / 3), the LM head's activation
    gradient (lm_head / 3), and the trainable layers' backward (2/3 of their share).
    """
    model_flops = np.asarray(model_flops, dtype=float)
    extra = np.asarray(recompute_extra, dtype=float)
    full_hw = model_flops + extra
    if ft.adapters:
        tuned = model_flops - (model_flops - attention) / 3.0 + 6.0 * adapter_params(model, ft)
        hw = tuned + extra
    else:
        k = min(ft.trainable_layers, model.layers) / model.layers
        layers = model_flops - lm_head
        tuned = model_flops / 3.0 + lm_head / 3.0 + k * layers * 2.0 / 3.0
        hw = tuned + k * extra
    return tuned / model_flops, hw / full_hw


def quant_slowdown(ft: FineTune) -> float:
    """Compute-time factor of the quantized base (QUANT_SLOWDOWN; 1 unless quantized)."""
    return QUANT_SLOWDOWN.get(ft.quant, 1.0) if ft.adapters else 1.0


def forward_share(model: ModelSpec, ft: FineTune, *, model_flops: Any, attention: Any,
                  lm_head: Any, recompute_extra: Any) -> Any:
    """Hardware FLOPs of a forward pass alone (an evaluation: model / 3 in the PaLM convention,
    nothing recomputed) over those of one fine-tuning step, per token. LoRA without recompute:
    (2N + attn/3) / (4N + 2 attn/3 + 6 adapters), about 0.47 for Llama 2 70B at 8,192 tokens;
    MLPerf's own log (NVIDIA DGX H100, v4.0) gives 37.3 s per pass over 173 samples against
    0.464 s per trained sample, 0.465."""
    _, hw_r = flops_ratios(model, ft, model_flops=model_flops, attention=attention,
                           lm_head=lm_head, recompute_extra=recompute_extra)
    model_flops = np.asarray(model_flops, dtype=float)
    full_hw = model_flops + np.asarray(recompute_extra, dtype=float)
    return model_flops / 3.0 / (hw_r * full_hw)
