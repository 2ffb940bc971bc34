"""Hostile files for the fuzzer: Hugging Face config.json files and TOML catalog overlays.

Each builder returns (bytes, why_invalid) where why_invalid is '' when the file may be valid.
"""

from __future__ import annotations

import json
import random

LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
         "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
         "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096,
         "hidden_act": "silu", "tie_word_embeddings": False}
MIXTRAL = {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "hidden_size": 4096,
           "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 32768,
           "hidden_act": "silu", "num_local_experts": 8, "num_experts_per_tok": 2}
GPT2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 12, "n_embd": 768,
        "n_head": 12, "vocab_size": 50257, "n_positions": 1024,
        "activation_function": "gelu_new"}
BASES = (LLAMA, MIXTRAL, GPT2)
REQUIRED = {"num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size", "n_layer",
            "n_embd", "n_head"}
INT_FIELDS = REQUIRED | {"intermediate_size", "num_key_value_heads", "max_position_embeddings",
                         "num_local_experts", "num_experts_per_tok", "n_positions"}
# value -> invalid in any integer field
BAD_INTS: tuple[object, ...] = (float("inf"), float("-inf"), float("nan"), 1e30, -100, 0, 1.5,
                                "x", "12", [1, 2], {"a": 1}, True, 10**9, 10**400, -1.0)
ZERO_OK = {"num_local_experts", "num_experts_per_tok"}  # 0 experts: a dense model
TYPE_KEYS = ("model_type", "architectures", "hidden_act", "activation_function")


def config_json(rng: random.Random) -> tuple[bytes, str]:
    """A config.json: a real base with one or two hostile edits (or a hostile whole file)."""
    r = rng.random()
    if r < 0.06:
        depth = rng.choice((1000, 100_000))
        return ("[" * depth + "]" * depth).encode(), "not a JSON object"
    if r < 0.1:
        return rng.choice((b"", b"\xff\xfe\x00garbage", b"[1, 2]", b"null", b"{", b'"x"')), \
            "not a JSON object"
    cfg = dict(rng.choice(BASES))
    why = ""
    for _ in range(rng.choice((0, 1, 1, 2))):
        key = rng.choice(sorted(cfg))
        op = rng.random()
        if op < 0.25 and key in REQUIRED:
            del cfg[key]
            why = why or f"no {key}"
        elif op < 0.35 and key in TYPE_KEYS:
            del cfg[key]  # the other type keys may still tell the type
        elif key in INT_FIELDS:
            bad = rng.choice(BAD_INTS)
            cfg[key] = bad
            zero_ok = key in ZERO_OK and bad == 0 and not isinstance(bad, bool)
            if not zero_ok and not (bad == 10**9 and key in ("vocab_size",
                                                              "max_position_embeddings")):
                why = why or f"{key} = {bad!r:.20}"
        else:
            cfg[key] = rng.choice(("x", 7, None, [], {}))
    if rng.random() < 0.1:  # a hand-written config: only the MoE keys and dimensions
        for k in TYPE_KEYS:
            cfg.pop(k, None)
        if "num_local_experts" not in cfg:
            why = why or "the model type cannot be told"
    if rng.random() < 0.03:  # buried deep nesting inside a valid object
        cfg["rope_scaling"] = json.loads("[" * 200 + "]" * 200)
        text = json.dumps(cfg)[:-1] + ', "deep": ' + "[" * 100_000 + "]" * 100_000 + "}"
        return text.encode(), "nested too deeply"
    return json.dumps(cfg).encode(), why


# (toml text, why invalid); the first rows look valid, the rest are hostile
OVERLAYS: tuple[tuple[str, str], ...] = (
    ('[[offer]]\nid = "aws-p5.48xlarge-us-east-1"\nusd_per_hour = { "on-demand" = 50.0 }\n', ""),
    ("[site.electricity_usd_per_kwh]\nvalue = 0.12\nunit = \"USD/kWh\"\nsource = \"me\"\n"
     "as_of = \"2026\"\n", ""),
    ('[[system]]\nid = "dgx-h100"\nprice_usd = 400000.0\nprice_source = "quote"\n'
     'price_date = "2026-01"\n', ""),
    ('[[system]]\nid = "dgx-h100"\ngpus_per_node = 0\n', "gpus_per_node = 0"),
    ('[[system]]\nid = "dgx-h100"\ngpus_per_node = -8\n', "gpus_per_node < 0"),
    ('[[system]]\nid = "dgx-h100"\ngpus_per_node = "x"\n', "gpus_per_node = 'x'"),
    ('[[model]]\nid = "llama2-7b"\nmax_seq_len = 0\n', "max_seq_len = 0"),
    ('[[model]]\nid = "llama2-7b"\nlayers = 1000000000\n', "layers = 1e9"),
    ("[efficiency.h100]\nmatmul_max = \"abc\"\n", "matmul_max = 'abc'"),
    ("[efficiency.h100]\nmatmul_max = 1e300\n", "matmul_max = 1e300"),
    ("[efficiency.h100]\nmatmul_max = -0.5\n", "matmul_max < 0"),
    ("[scenarios.startup]\nnodes = \"x\"\n", "nodes = 'x'"),
    ("[scenarios.startup]\nbudget_usd = -5\n", "budget_usd < 0"),
    ("[site.electricity_usd_per_kwh]\nvalue = 1e300\n", "electricity = 1e300"),
    ("[site.pue]\nvalue = nan\n", "pue = nan"),
    ("[site.pue]\nvalue = inf\n", "pue = inf"),
    ('[[accelerator]]\nid = "h100-sxm"\nmemory_gib = 1e300\n', "memory_gib = 1e300"),
    ('[[accelerator]]\nid = "h100-sxm"\nmemory_gib = 0\n', "memory_gib = 0"),
    ('[[accelerator]]\nid = "h100-sxm"\npeak_tflops = { bf16 = -1 }\n', "peak < 0"),
    ('[[accelerator]]\nid = "h100-sxm"\ntdp_watts = "hot"\n', "tdp_watts = 'hot'"),
    ('[[offer]]\nid = "aws-p5.48xlarge-us-east-1"\nusd_per_hour = { "on-demand" = inf }\n',
     "price = inf"),
    ('[[offer]]\nid = "aws-p5.48xlarge-us-east-1"\ncount = 0\n', "count = 0"),
    ('[[fabric]]\nid = "ib-ndr"\nbytes_per_s_per_direction = 0\n', "bandwidth = 0"),
    ('[[fabric]]\nid = "ib-ndr"\ngb_per_s_per_direction = 0\n', "bandwidth = 0"),
    ("[[accelerator]\n", "not valid TOML"),
    ("x = 1\n", "unknown table"),
)


def overlay(rng: random.Random) -> tuple[bytes, str]:
    if rng.random() < 0.05:
        return b"\xff\xfe[[offer]]\n\x80\x81", "not UTF-8"
    text, why = rng.choice(OVERLAYS)
    return text.encode(), why
