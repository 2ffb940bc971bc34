"""Reading a Hugging Face config.json: every size checked, the MLP told, never guessed (#10)."""

from __future__ import annotations

import json

import pytest

from gpuplan.catalog import load_catalog
from gpuplan.cli import main
from gpuplan.errors import ConfigError
from gpuplan.workload import model_from_hf_config, resolve_model

MIXTRAL = {"architectures": ["MixtralForCausalLM"], "hidden_size": 4096,
           "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 32768,
           "hidden_act": "silu", "num_local_experts": 8, "num_experts_per_tok": 2}
LLAMA = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
         "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 32000,
         "max_position_embeddings": 4096, "hidden_act": "silu"}


def write(tmp_path, cfg, name="config.json"):
    p = tmp_path / name
    p.write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
    return p


def err(tmp_path, cfg) -> str:
    p = write(tmp_path, cfg)
    with pytest.raises(ConfigError) as e:
        model_from_hf_config(p)
    return str(e.value).replace(str(p), "PATH")


@pytest.mark.parametrize("drop", [(), ("architectures",), ("hidden_act",),
                                  ("architectures", "hidden_act")])
def test_mixtral_without_model_type_is_the_46_7b_moe(tmp_path, drop):
    """Issue item 9: a hand-written Mixtral config had been read as a 31.7 B GELU dense model.
    Any one of architectures, hidden_act or the MoE keys tells the gated MLP."""
    cfg = {k: v for k, v in MIXTRAL.items() if k not in drop}
    m = model_from_hf_config(write(tmp_path, cfg))
    preset = load_catalog().model("mixtral-8x7b")
    assert (m.mlp, m.experts, m.experts_per_token) == ("swiglu", 8, 2)
    assert m.total_params() == preset.total_params()  # 46.7e9, exact: same formula and sizes
    assert round(m.total_params() / 1e9, 1) == 46.7


def test_architectures_name_the_type(tmp_path):
    cfg = {"architectures": ["GPT2LMHeadModel"], "n_layer": 12, "n_embd": 768, "n_head": 12,
           "vocab_size": 50257}
    assert model_from_hf_config(write(tmp_path, cfg)).mlp == "gelu"
    cfg["architectures"] = ["LlamaForCausalLM"]
    assert model_from_hf_config(write(tmp_path, cfg)).mlp == "swiglu"


def test_an_untold_type_is_an_error_not_a_guess(tmp_path):
    cfg = {k: v for k, v in LLAMA.items() if k not in ("model_type", "hidden_act")}
    assert err(tmp_path, cfg) == (
        "model config 'PATH': cannot tell its MLP (no model_type or architectures, activation "
        "'None'); add \"hidden_act\": \"silu\" for a gated MLP (Llama, Mistral, Qwen) or "
        "\"gelu\" for a plain one (GPT-2, BERT)")


@pytest.mark.parametrize(("key", "value", "shown"), [
    ("hidden_size", 1.5, "'1.5'"),
    ("hidden_size", "4096", "'\"4096\"'"),
    ("num_hidden_layers", 1e30, "'1e+30'"),
    ("num_hidden_layers", 1_000_000_000, "'1000000000'"),
    ("num_hidden_layers", True, "'true'"),
    ("max_position_embeddings", -100, "'-100'"),
    ("num_local_experts", "x", "'\"x\"'"),
    ("num_local_experts", [1, 2], "'[1, 2]'"),
    ("vocab_size", 0, "'0'"),
])
def test_sizes_are_whole_numbers_in_range(tmp_path, key, value, shown):
    lo, hi = {"num_hidden_layers": (1, "10,000"), "hidden_size": (1, "1,000,000"),
              "max_position_embeddings": (1, "100,000,000"), "num_local_experts": (0, "100,000"),
              "vocab_size": (1, "100,000,000")}[key]
    assert err(tmp_path, {**MIXTRAL, key: value}) == (
        f"model config 'PATH': {key} must be a whole number from {lo} to {hi}, got {shown}")


def test_infinity_in_an_integer_field(tmp_path):
    text = json.dumps(MIXTRAL).replace('"num_hidden_layers": 32', '"num_hidden_layers": Infinity')
    assert err(tmp_path, text) == ("model config 'PATH': num_hidden_layers must be a whole number "
                                   "from 1 to 10,000, got 'Infinity'")


def test_integral_floats_are_whole_numbers(tmp_path):
    m = model_from_hf_config(write(tmp_path, {**LLAMA, "hidden_size": 4096.0}))
    assert m.hidden == 4096 and isinstance(m.hidden, int)


def test_deep_nesting_is_one_line(tmp_path):
    assert err(tmp_path, "[" * 100_000 + "]" * 100_000) == (
        "model config 'PATH' is nested too deeply to be a config.json")
    buried = json.dumps(LLAMA)[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert err(tmp_path, buried) == "model config 'PATH' is nested too deeply to be a config.json"


@pytest.mark.parametrize(("text", "message"), [
    ("[1, 2]", "model config 'PATH' must hold a JSON object, not a list"),
    ("", "model config 'PATH' is not valid JSON: Expecting value: line 1 column 1 (char 0)"),
])
def test_not_an_object(tmp_path, text, message):
    assert err(tmp_path, text) == message


def test_not_utf8(tmp_path):
    p = tmp_path / "config.json"
    p.write_bytes(b"\xff\xfe{")
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        model_from_hf_config(p)


def test_shape_checks(tmp_path):
    assert err(tmp_path, {**LLAMA, "num_attention_heads": 33}) == (
        "model config 'PATH': hidden_size 4,096 is not a multiple of num_attention_heads 33; "
        "fix one or add head_dim")
    no_k = {k: v for k, v in MIXTRAL.items() if k != "num_experts_per_tok"}
    assert err(tmp_path, no_k) == ("model config 'PATH' has 8 experts but no num_experts_per_tok;"
                                   " add it (Mixtral: 2)")
    assert err(tmp_path, {**LLAMA, "tie_word_embeddings": "yes"}) == (
        "model config 'PATH': tie_word_embeddings must be true or false, got '\"yes\"'")


def test_deepseek_v3_config_reads_latent_attention(tmp_path):
    """The released DeepSeek-V3 config.json (sizes only) gives the preset's parameter count."""
    cfg = {"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
           "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
           "num_key_value_heads": 128, "n_routed_experts": 256, "num_experts_per_tok": 8,
           "n_shared_experts": 1, "first_k_dense_replace": 3, "q_lora_rank": 1536,
           "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
           "v_head_dim": 128, "vocab_size": 129280, "max_position_embeddings": 163840}
    m = model_from_hf_config(write(tmp_path, cfg))
    assert m.total_params() == load_catalog().model("deepseek-v3").total_params()


def test_path_too_long_for_the_os(capsys):
    name = "/" + "a" * 5000 + ".json"
    with pytest.raises(ConfigError) as e:
        resolve_model(load_catalog(), name)
    assert str(e.value) == ("cannot use --model '/" + "a" * 159 + "...' (5,006 characters): "
                            "File name too long")
    assert main(["estimate", "--model", name[:-5], "--gpu", "h100"]) == 2
    assert capsys.readouterr().err == (
        "gpuplan: error: cannot use --model '/" + "a" * 159 + "...' (5,001 characters): File name "
        "too long\n")


def test_negative_context_no_longer_gives_negative_throughput(tmp_path, capsys):
    """Issue item 3: max_position_embeddings -100 printed tokens/s -95,906 and MFU -0.2%."""
    p = write(tmp_path, {**LLAMA, "max_position_embeddings": -100})
    assert main(["estimate", "--model", str(p), "--gpu", "h100", "--gpus", "8"]) == 2
    assert "max_position_embeddings must be a whole number from 1 to 100,000,000, got '-100'" \
        in capsys.readouterr().err


def test_read_failures_are_one_line(tmp_path, monkeypatch):
    """The file is read through userfile.read_text, with a size limit."""
    monkeypatch.setattr("gpuplan.workload.MAX_CONFIG_BYTES", 2**20)
    p = write(tmp_path, " " * (2**20 + 1))
    with pytest.raises(ConfigError) as e:
        model_from_hf_config(p)
    assert str(e.value) == f"model config '{p}' is over 1 MiB; give a path to config.json"
    with pytest.raises(ConfigError) as e:
        model_from_hf_config(tmp_path / "nope.json")
    assert str(e.value) == f"model config '{tmp_path / 'nope.json'}' does not exist; check the path"


def test_architecture_names_map_to_one_model_type_each():
    """`architectures` is matched by the type name without '_' and '-': no two types may share
    one (the lookup table would silently keep only one of them)."""
    from gpuplan.workload import _BY_ARCH_NAME, GATED_TYPES, PLAIN_TYPES, _model_type

    assert len(_BY_ARCH_NAME) == len(GATED_TYPES | PLAIN_TYPES)
    assert _model_type({"architectures": ["XLMRobertaForMaskedLM"]}) == "xlm-roberta"
    assert _model_type({"architectures": ["GPTNeoXForCausalLM"]}) == "gpt_neox"
    assert _model_type({"architectures": ["NewThingForCausalLM"]}) == "newthing"
