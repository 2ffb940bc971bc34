"""Models to train: presets from the catalog, a Hugging Face config.json on disk, or flags (L2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .catalog import Catalog
from .errors import ConfigError
from .spec import ModelSpec


def _first(cfg: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return cfg[k]
    return None


def model_from_hf_config(path: str | Path) -> ModelSpec:
    """Read a Hugging Face `config.json` from disk (no network) into a ModelSpec.

    Understands Llama/Mistral/Qwen/Mixtral/DeepSeek (`num_hidden_layers`, `hidden_size`, ...)
    and GPT-2/GPT-NeoX/BERT naming (`n_layer`, `n_embd`, ...).
    """
    p = Path(path)
    try:
        cfg = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            f"model config '{path}' does not exist; give a path to config.json") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"model config '{path}' is not valid JSON: {err}") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"model config '{path}' must hold a JSON object")
    layers = _first(cfg, "num_hidden_layers", "n_layer", "num_layers")
    hidden = _first(cfg, "hidden_size", "n_embd", "d_model")
    heads = _first(cfg, "num_attention_heads", "n_head", "num_heads")
    vocab = _first(cfg, "vocab_size")
    missing = [n for n, v in (("num_hidden_layers", layers), ("hidden_size", hidden),
                              ("num_attention_heads", heads), ("vocab_size", vocab)) if v is None]
    if missing:
        raise ConfigError(
            f"model config '{path}' lacks {', '.join(missing)}; add them or give the model "
            f"with --layers --hidden --heads --vocab"
        )
    act = str(_first(cfg, "hidden_act", "activation_function", "hidden_activation") or "gelu")
    gated = "silu" in act or "swiglu" in act or cfg.get("model_type") in (
        "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "deepseek_v3", "gemma")
    ffn = _first(cfg, "intermediate_size", "n_inner", "ffn_dim") or 4 * hidden
    experts = int(_first(cfg, "num_local_experts", "n_routed_experts", "num_experts") or 0)
    top_k = int(_first(cfg, "num_experts_per_tok", "moe_topk") or 0)
    kv = int(_first(cfg, "num_key_value_heads", "num_kv_heads") or heads)
    try:
        return ModelSpec(
            id=p.parent.name or p.stem,
            name=str(cfg.get("_name_or_path") or p.parent.name or p.stem),
            layers=int(layers),
            hidden=int(hidden),
            heads=int(heads),
            kv_heads=kv,
            ffn=int(ffn),
            vocab=int(vocab),
            mlp="swiglu" if gated else "relu2" if act in ("relu2", "squared_relu") else "gelu",
            tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            head_dim=int(cfg.get("head_dim") or 0),
            experts=experts if experts > 1 else 0,
            experts_per_token=top_k if experts > 1 else 0,
            moe_ffn=int(_first(cfg, "moe_intermediate_size") or 0),
            shared_experts=int(_first(cfg, "n_shared_experts") or 0),
            dense_layers=int(_first(cfg, "first_k_dense_replace") or 0),
            max_seq_len=int(_first(cfg, "max_position_embeddings", "n_positions") or 2048),
            source=str(p),
            as_of="",
        )
    except (TypeError, ValueError) as err:
        raise ConfigError(f"model config '{path}': {err}") from None


def model_from_flags(*, layers: int, hidden: int, heads: int, vocab: int,
                     kv_heads: int | None = None, ffn: int | None = None, mlp: str = "gelu",
                     tied_embeddings: bool = False) -> ModelSpec:
    """Explicit dimensions. Defaults: GELU MLP of 4*hidden, kv_heads = heads, untied embeddings."""
    if hidden % heads:
        raise ConfigError(f"--hidden {hidden} must be a multiple of --heads {heads}")
    return ModelSpec(id="custom", name=f"custom {layers}x{hidden}", layers=layers, hidden=hidden,
                     heads=heads, kv_heads=kv_heads or heads, ffn=ffn or 4 * hidden, vocab=vocab,
                     mlp=mlp, tied_embeddings=tied_embeddings, source="command-line flags")


def resolve_model(cat: Catalog, name: str) -> ModelSpec:
    """A preset id/alias, or a path to a config.json (or a folder holding one)."""
    p = Path(name)
    if name.endswith(".json") or p.is_dir():
        return model_from_hf_config(p / "config.json" if p.is_dir() else p)
    return cat.model(name)


# --- the batch a request trains with when the user gives none ---------------------------
DEFAULT_BATCH_TOKENS = 4 * 2**20  # ~4M tokens per step, as GPT-3/Llama-class runs use


def default_seq_len(model: ModelSpec) -> int:
    """The model's sequence length, at most 8192."""
    return int(min(model.max_seq_len, 8192))


def default_global_batch(seq_len: int, multiple: int) -> int:
    """About 4M tokens per step, rounded up to a multiple of dp x micro-batch."""
    seqs = max(1, round(DEFAULT_BATCH_TOKENS / seq_len))
    return max(multiple, -(-seqs // multiple) * multiple)
