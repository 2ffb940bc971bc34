"""Models to train: presets from the catalog, a Hugging Face config.json on disk, or flags (L2)."""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from dataclasses import dataclass
from dataclasses import field as dc_field
from dataclasses import fields as dc_fields
from pathlib import Path
from typing import Any

from .catalog import Catalog
from .errors import ConfigError, quote
from .spec import ModelSpec
from .userfile import display_path, read_text

MAX_CONFIG_BYTES = 16 * 2**20  # a config.json is a few kB; anything this large is not one
PATH_LIMIT = 160  # characters of a path a message shows

# ModelSpec field -> (config.json keys, smallest, largest). The bounds are far beyond any real
# model (Llama 3 405B: 126 layers, hidden 16384) but keep every later search bounded.
INT_FIELDS: dict[str, tuple[tuple[str, ...], int, int]] = {
    "layers": (("num_hidden_layers", "n_layer", "num_layers"), 1, 10_000),
    "hidden": (("hidden_size", "n_embd", "d_model"), 1, 1_000_000),
    "heads": (("num_attention_heads", "n_head", "num_heads"), 1, 100_000),
    "vocab": (("vocab_size",), 1, 100_000_000),
    "kv_heads": (("num_key_value_heads", "num_kv_heads"), 1, 100_000),
    "ffn": (("intermediate_size", "n_inner", "ffn_dim"), 1, 10_000_000),
    "experts": (("num_local_experts", "n_routed_experts", "num_experts"), 0, 100_000),
    "experts_per_token": (("num_experts_per_tok", "moe_topk"), 0, 100_000),
    "moe_ffn": (("moe_intermediate_size",), 0, 10_000_000),
    "shared_experts": (("n_shared_experts",), 0, 100_000),
    "dense_layers": (("first_k_dense_replace",), 0, 10_000),
    "max_seq_len": (("max_position_embeddings", "n_positions"), 1, 100_000_000),
    "head_dim": (("head_dim",), 0, 100_000),
    "nope_head_dim": (("qk_nope_head_dim",), 0, 100_000),  # MLA: the head_dim without rotary
    "q_lora_rank": (("q_lora_rank",), 0, 1_000_000),
    "kv_lora_rank": (("kv_lora_rank",), 0, 1_000_000),
    "rope_head_dim": (("qk_rope_head_dim",), 0, 100_000),
    "v_head_dim": (("v_head_dim",), 0, 100_000),
}
REQUIRED = ("layers", "hidden", "heads", "vocab")

# model_type -> gated (SwiGLU/GeGLU, 3 matrices) or not (2 matrices)
GATED_TYPES = frozenset((
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "deepseek_v2",
    "deepseek_v3", "gemma", "gemma2", "gemma3", "gemma3_text", "phi3", "olmo", "olmo2",
    "internlm2", "granite", "granitemoe", "cohere", "cohere2", "dbrx", "starcoder2_gated",
    "baichuan", "yi", "exaone", "minicpm", "stablelm"))
PLAIN_TYPES = frozenset((
    "gpt2", "gpt_neox", "gptj", "gpt_neo", "bert", "roberta", "opt", "bloom", "falcon",
    "gpt_bigcode", "phi", "mpt", "starcoder2", "codegen", "xlm-roberta", "electra"))
# an `architectures` entry without its head suffix, lower case and without '_' or '-' -> model_type
_HEADS = ("ForCausalLM", "LMHeadModel", "ForMaskedLM", "ForPreTraining", "ForConditionalGeneration",
          "Model")
_BY_ARCH_NAME = {t.replace("_", "").replace("-", ""): t for t in GATED_TYPES | PLAIN_TYPES}
GATED_ACTS = ("silu", "swish", "swiglu", "geglu")
PLAIN_ACTS = ("gelu", "relu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "quick_gelu")


def _first(cfg: dict[str, Any], *keys: str) -> tuple[str, Any]:
    for k in keys:
        if cfg.get(k) is not None:
            return k, cfg[k]
    return keys[0], None


def _read_json(path: str | Path) -> dict[str, Any]:
    """The parsed object, or one line saying why the file cannot be one."""
    where = quote(str(path), PATH_LIMIT)
    text = read_text(path, "model config", "give a path to config.json", error=ConfigError,
                     shown=display_path(path, PATH_LIMIT), max_bytes=MAX_CONFIG_BYTES)
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"model config {where} is not valid JSON: {err}") from None
    except RecursionError:
        raise ConfigError(f"model config {where} is nested too deeply to be a config.json"
                          ) from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"model config {where} must hold a JSON object, not a "
                          f"{type(cfg).__name__}")
    return cfg


def _whole(where: str, key: str, value: Any, lo: int, hi: int) -> int:
    """A JSON number that must be a whole number in [lo, hi] (4096.0 counts; 1.5 does not)."""
    whole = value
    ok = isinstance(value, int) and not isinstance(value, bool)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        ok, whole = True, int(value)
    if not ok or not lo <= whole <= hi:
        raise ConfigError(f"model config {where}: {key} must be a whole number from {lo:,} to "
                          f"{hi:,}, got {quote(json.dumps(value))}")
    return int(whole)


def _ints(cfg: dict[str, Any], where: str) -> dict[str, int]:
    """Every INT_FIELDS entry the config has, checked; the required ones must be there."""
    out: dict[str, int] = {}
    for field, (keys, lo, hi) in INT_FIELDS.items():
        key, value = _first(cfg, *keys)
        if value is not None:
            out[field] = _whole(where, key, value, lo, hi)
    missing = [INT_FIELDS[f][0][0] for f in REQUIRED if f not in out]
    if missing:
        raise ConfigError(f"model config {where} lacks {', '.join(missing)}; add them or give "
                          f"the model with --layers --hidden --heads --vocab")
    return out


def _model_type(cfg: dict[str, Any]) -> str:
    """model_type, else the one `architectures` names ('MixtralForCausalLM' -> 'mixtral')."""
    t = cfg.get("model_type")
    if isinstance(t, str) and t:
        return t.lower()
    archs = cfg.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        name = archs[0]
        for head in _HEADS:
            if name.endswith(head) and len(name) > len(head):
                name = name[: -len(head)]
                break
        base = name.lower()
        return _BY_ARCH_NAME.get(base, base)
    return ""


def mlp_kind(cfg: dict[str, Any], where: str) -> str:
    """'swiglu', 'relu2' or 'gelu' from model_type / architectures, then the activation, then
    the MoE keys (every Hugging Face MoE family has gated experts); an error when nothing
    tells."""
    _, act = _first(cfg, "hidden_act", "activation_function", "hidden_activation")
    if isinstance(act, str) and act.lower() in ("relu2", "squared_relu"):  # Nemotron
        return "relu2"
    mtype = _model_type(cfg)
    if mtype in GATED_TYPES:
        return "swiglu"
    if mtype in PLAIN_TYPES:
        return "gelu"
    if isinstance(act, str) and act.lower() in GATED_ACTS:
        return "swiglu"
    if isinstance(act, str) and act.lower() in PLAIN_ACTS:
        return "gelu"
    if _first(cfg, *INT_FIELDS["experts"][0])[1] is not None:
        return "swiglu"
    told = f"model_type {quote(mtype)}" if mtype else "no model_type or architectures"
    raise ConfigError(
        f"model config {where}: cannot tell its MLP ({told}, activation {quote(act)}); add "
        f"\"hidden_act\": \"silu\" for a gated MLP (Llama, Mistral, Qwen) or \"gelu\" for a "
        f"plain one (GPT-2, BERT)")


def _check_shape(v: dict[str, int], where: str) -> None:
    """What the sizes must satisfy together (each alone is checked by _whole)."""
    if not v.get("head_dim") and not v.get("kv_lora_rank") and v["hidden"] % v["heads"]:
        raise ConfigError(f"model config {where}: hidden_size {v['hidden']:,} is not a multiple "
                          f"of num_attention_heads {v['heads']:,}; fix one or add head_dim")
    if v.get("dense_layers", 0) >= v["layers"] and v.get("experts", 0) > 1:
        raise ConfigError(f"model config {where}: first_k_dense_replace {v['dense_layers']:,} "
                          f"leaves no MoE layer of {v['layers']:,}")


def model_from_hf_config(path: str | Path) -> ModelSpec:
    """Read a Hugging Face `config.json` from disk (no network) into a ModelSpec.

    Understands Llama/Mistral/Qwen/Mixtral/DeepSeek (`num_hidden_layers`, `hidden_size`, ...,
    multi-head latent attention) and GPT-2/GPT-NeoX/BERT naming (`n_layer`, `n_embd`, ...).
    Every size must be a whole number in a stated range; nothing is truncated or guessed.
    """
    p = Path(path)
    where = quote(str(path), PATH_LIMIT)
    cfg = _read_json(p)
    v = _ints(cfg, where)
    mlp = mlp_kind(cfg, where)
    experts = v.get("experts", 0)
    if experts > 1 and not v.get("experts_per_token"):
        raise ConfigError(f"model config {where} has {experts} experts but no "
                          f"num_experts_per_tok; add it (Mixtral: 2)")
    tied = cfg.get("tie_word_embeddings", False)
    if not isinstance(tied, bool):
        raise ConfigError(f"model config {where}: tie_word_embeddings must be true or false, "
                          f"got {quote(json.dumps(tied))}")
    _check_shape(v, where)
    name = cfg.get("_name_or_path")
    mla = bool(v.get("kv_lora_rank"))
    return ModelSpec(
        id=p.parent.name or p.stem,
        name=name if isinstance(name, str) and name else (p.parent.name or p.stem),
        layers=v["layers"], hidden=v["hidden"], heads=v["heads"],
        kv_heads=v.get("kv_heads", v["heads"]), ffn=v.get("ffn", 4 * v["hidden"]),
        vocab=v["vocab"], mlp=mlp, tied_embeddings=tied,
        head_dim=v.get("nope_head_dim", 0) if mla else v.get("head_dim", 0),
        experts=experts if experts > 1 else 0,
        experts_per_token=v.get("experts_per_token", 0) if experts > 1 else 0,
        moe_ffn=v.get("moe_ffn", 0), shared_experts=v.get("shared_experts", 0),
        dense_layers=v.get("dense_layers", 0) if experts > 1 else 0,
        q_lora_rank=v.get("q_lora_rank", 0), kv_lora_rank=v.get("kv_lora_rank", 0),
        rope_head_dim=v.get("rope_head_dim", 0) if mla else 0,
        v_head_dim=v.get("v_head_dim", 0) if mla else 0,
        max_seq_len=v.get("max_seq_len", 2048), source=str(p), as_of="")


def model_from_flags(*, layers: int, hidden: int, heads: int, vocab: int,
                     kv_heads: int | None = None, ffn: int | None = None, mlp: str = "gelu",
                     tied_embeddings: bool = False) -> ModelSpec:
    """Explicit dimensions. Defaults: GELU MLP of 4*hidden, kv_heads = heads, untied embeddings."""
    if hidden % heads:
        raise ConfigError(f"--hidden {hidden} must be a multiple of --heads {heads}")
    return ModelSpec(id="custom", name=f"custom {layers}x{hidden}", layers=layers, hidden=hidden,
                     heads=heads, kv_heads=kv_heads or heads, ffn=ffn or 4 * hidden, vocab=vocab,
                     mlp=mlp, tied_embeddings=tied_embeddings, source="command-line flags")


# Most tokens a run may train on: ~70,000 times Llama 3's 15T (Meta 2024). More is a typo, and
# 1e300 printed days and dollars 300 digits long.
MAX_TOKENS = 1e18


def check_tokens(tokens: float, batch_tokens: int, given: object) -> float:
    """A token count of at least one optimizer step (`batch_tokens` = global batch x sequence
    length): fewer cannot be trained, and would print a 0-day plan (1e-320 divided by zero);
    and at most MAX_TOKENS. `given` is the --tokens text, None when --samples x --seq-len x
    --epochs gave the count (the message then names those flags)."""
    what = (f"--tokens {quote(given)}" if given is not None else
            f"--samples x --seq-len x --epochs = "
            f"{f'{tokens:,.0f}' if 1 <= tokens < 1e15 else f'{tokens:.4g}'} tokens")
    if not tokens >= batch_tokens:
        raise ConfigError(
            f"{what} is fewer than one optimizer step ({batch_tokens:,} tokens "
            f"= global batch x sequence length); give at least {batch_tokens:,} tokens or a "
            f"smaller --global-batch")
    if not tokens <= MAX_TOKENS:
        raise ConfigError(f"{what} is more than {MAX_TOKENS:.0e} tokens (about 70,000 times "
                          "Llama 3's 15T); check the value")
    return tokens


def resolve_model(cat: Catalog, name: str) -> ModelSpec:
    """A preset id/alias, or a path to a config.json (or a folder holding one)."""
    is_dir = _is_dir(name)
    if name.endswith(".json") or is_dir:
        p = Path(name)
        return model_from_hf_config(p / "config.json" if is_dir else p)
    return cat.model(name)


# the errors `Path.is_dir` takes for "not a folder" (pathlib._IGNORED_ERRNOS)
_NOT_THERE = (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP)


def _is_dir(name: str) -> bool:
    """`Path(name).is_dir()` in one `os.stat` (a preset name is looked up on every estimate);
    an OS error other than "not there" (a name too long) is one line."""
    try:
        return stat.S_ISDIR(os.stat(name or ".").st_mode)  # Path("") is "."
    except ValueError:  # an embedded NUL: not a path
        return False
    except OSError as err:
        if err.errno in _NOT_THERE:
            return False
        raise ConfigError(f"cannot use --model {quote(name, PATH_LIMIT)}: "
                          f"{err.strerror or err}") from None


# --- the batch a request trains with when the user gives none ---------------------------
DEFAULT_BATCH_TOKENS = 4 * 2**20  # ~4M tokens per step, as GPT-3/Llama-class runs use


def default_seq_len(model: ModelSpec) -> int:
    """The model's sequence length, at most 8192."""
    return int(min(model.max_seq_len, 8192))


def default_global_batch(seq_len: int, multiple: int) -> int:
    """About 4M tokens per step, rounded up to a multiple of dp x micro-batch."""
    seqs = max(1, round(DEFAULT_BATCH_TOKENS / seq_len))
    return max(multiple, -(-seqs // multiple) * multiple)


# --- fine-tuning: the method is part of the workload (#15) -------------------------------
METHODS = ("full", "lora", "qlora", "freeze")
LORA_TARGETS = ("attn", "mlp", "all")
QUANTS = ("none", "nf4", "int8", "fp8")
# LLaMA-Factory's `freeze_trainable_layers` default (src/llamafactory/hparams/finetuning_args.py,
# FreezeArguments): method `freeze` trains the last 2 transformer layers, the rest (embeddings
# and LM head included) stays frozen.
FREEZE_TRAINABLE_LAYERS = 2
# Sequences per optimizer step when a fine-tune gives none: the QLoRA paper's batch size 16 for
# its 7B-65B runs (Dettmers et al. 2023, arXiv 2305.14314, appendix B, Table 9).
FINETUNE_GLOBAL_BATCH = 16


@dataclass(frozen=True, kw_only=True)
class FineTune:
    """How a model is adapted: the method, the LoRA rank and targets, the frozen base's storage.

    method 'full' is today's pre-training accounting (every weight trained). 'lora' and 'qlora'
    train rank-r adapters beside frozen weights (Hu et al. 2021, arXiv 2106.09685; Dettmers et
    al. 2023, arXiv 2305.14314); 'qlora' stores the base in NF4. 'freeze' trains the last
    `trainable_layers` layers and freezes the rest.
    """

    method: str = "full"
    lora_rank: int = 16
    lora_targets: str = "all"
    quant: str = "none"
    trainable_layers: int = FREEZE_TRAINABLE_LAYERS
    paged: bool = False  # bitsandbytes paged optimizer (QLoRA's default)

    @property
    def adapters(self) -> bool:
        return self.method in ("lora", "qlora")

    @property
    def tuned(self) -> bool:
        """Anything other than full training."""
        return self.method != "full"


@dataclass(frozen=True, kw_only=True)
class TunedModel(ModelSpec):
    """A model with the fine-tuning method it is trained with (`FineTune`)."""

    finetune: FineTune = dc_field(default_factory=FineTune)


def finetune_spec(model: ModelSpec, *, method: str = "full", lora_rank: int | None = None,
                  lora_targets: str | None = None, quant: str | None = None,
                  vendor: str = "") -> FineTune:
    """The checked `FineTune` for `model` (one clear line for each wrong input)."""
    method = (method or "full").lower()
    if method not in METHODS:
        raise ConfigError(f"unknown --method {quote(method)}; choose one of: {', '.join(METHODS)}")
    targets = (lora_targets or "all").lower()
    if targets not in LORA_TARGETS:
        raise ConfigError(f"unknown --lora-targets {quote(targets)}; choose one of: "
                          f"{', '.join(LORA_TARGETS)} (attn = q, k, v, o projections; mlp = the "
                          "MLP matrices)")
    rank = 16 if lora_rank is None else lora_rank
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        raise ConfigError(f"--lora-rank must be a whole number >= 1, got {rank!r}")
    if rank > model.hidden:
        raise ConfigError(f"--lora-rank {rank} is larger than the model's hidden size "
                          f"{model.hidden}; a LoRA rank is a few to a few hundred (16 is usual)")
    q = (quant or ("nf4" if method == "qlora" else "none")).lower()
    if q not in QUANTS:
        raise ConfigError(f"unknown --quant {quote(q)}; choose one of: {', '.join(QUANTS)}")
    if method == "qlora" and q != "nf4":
        raise ConfigError(f"--method qlora stores the base in NF4; drop --quant {q} or use "
                          f"--method lora --quant {q}")
    if q != "none" and method in ("full", "freeze"):
        raise ConfigError(f"--quant {q} quantizes a frozen base; it needs --method lora or qlora "
                          f"(--method {method} trains the quantized weights)")
    for flag, given in (("--lora-rank", lora_rank), ("--lora-targets", lora_targets)):
        if given is not None and method not in ("lora", "qlora"):
            raise ConfigError(f"{flag} applies to --method lora or qlora, not {method}")
    if method in ("lora", "qlora") and targets in ("mlp", "all") and model.ffn <= 0:
        raise ConfigError(f"model {model.id} has no MLP to put LoRA adapters on; "
                          "use --lora-targets attn")
    if method == "freeze" and model.layers < FREEZE_TRAINABLE_LAYERS:
        raise ConfigError(f"--method freeze trains the last {FREEZE_TRAINABLE_LAYERS} layers; "
                          f"model {model.id} has {model.layers}")
    return FineTune(method=method, lora_rank=rank, lora_targets=targets, quant=q,
                    paged=method == "qlora")


def with_finetune(model: ModelSpec, ft: FineTune) -> ModelSpec:
    """`model` carrying `ft` (the model itself for full training)."""
    if not ft.tuned:
        return model
    values = {f.name: getattr(model, f.name) for f in dc_fields(ModelSpec)}
    return TunedModel(**values, finetune=ft)


def finetune_of(model: ModelSpec) -> FineTune | None:
    """The fine-tuning method `model` carries, or None for full training."""
    ft = getattr(model, "finetune", None)
    return ft if ft is not None and ft.tuned else None


def finetune_tokens(*, samples: int, seq_len: int, epochs: float = 1.0, packing: bool = True,
                    padding_efficiency: float = 1.0) -> float:
    """Tokens the GPUs process: `samples` samples of on average `padding_efficiency` x
    `seq_len` tokens, `epochs` times.

    Packed (samples concatenated into full windows, as torchtune's and TRL's `packing` do):
    samples * seq_len * efficiency * epochs, no padding processed. Padded (each sample alone in
    a window of seq_len): samples * seq_len * epochs; the GPUs process the padding too, so only
    `padding_efficiency` of that work is useful. The default efficiency 1.0 takes the samples to
    fill their window (then packing changes nothing).
    """
    for name, v in (("--samples", samples), ("--seq-len", seq_len)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ConfigError(f"{name} must be a whole number >= 1, got {v!r}")
    if not (isinstance(epochs, (int, float)) and math.isfinite(epochs) and epochs > 0):
        raise ConfigError(f"--epochs must be a number > 0, got {epochs!r}")
    eff = padding_efficiency
    if not (isinstance(eff, (int, float)) and 0 < eff <= 1):
        raise ConfigError(f"--padding-efficiency must be in (0, 1] (average sample tokens / "
                          f"--seq-len), got {eff!r}")
    if samples * seq_len > MAX_TOKENS / epochs:  # an int compared, never float()ed (overflow)
        raise ConfigError(f"--samples x --seq-len x --epochs is more than {MAX_TOKENS:.0e} "
                          "tokens (about 70,000 times Llama 3's 15T); check the values")
    return float(samples) * seq_len * float(epochs) * (float(eff) if packing else 1.0)
