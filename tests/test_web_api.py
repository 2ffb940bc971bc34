"""The JSON API through the ASGI test client: responses are the CLI's --json, bad input is a
4xx with the CLI's one line, limits hold, and a fuzzer over request bodies finds no 5xx."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from gpuplan.web import adapter
from gpuplan.web.app import create_app

EST = {"model": "llama3-8b", "gpu": "h100-sxm", "gpus": 8, "zero": 3, "tokens": "1T",
       "pricing": "own"}
PLAN = {"model": "llama3-8b", "tokens": "1T", "deadline_days": 30, "gpu": ["h100-sxm", "b200"]}


@pytest.fixture(scope="module")
def client():
    return TestClient(create_app(), raise_server_exceptions=False)


def test_estimate_is_the_cli_json(client, run_json):
    r = client.post("/api/estimate", json=EST)
    assert r.status_code == 200
    cli = run_json("estimate", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8",
                   "--zero", "3", "--tokens", "1T", "--pricing", "own")
    assert r.json() == cli


def test_plan_is_the_cli_json(client, run_json):
    r = client.post("/api/plan", json=PLAN)
    assert r.status_code == 200
    cli = run_json("plan", "--model", "llama3-8b", "--tokens", "1T", "--deadline-days", "30",
                   "--gpu", "h100-sxm", "--gpu", "b200")
    got = r.json()
    got.pop("elapsed_s"), cli.pop("elapsed_s")  # wall time differs run to run
    assert got == cli


def test_plan_view_adds_charts_commands_and_reproducible_rows(client):
    r = client.post("/api/plan?charts=1", json=PLAN).json()
    assert set(r["charts"]) == {"pareto", "memory", "outlook", "buy_rent"}
    assert all(s.startswith("<svg") for s in r["charts"].values())
    assert len(r["commands"]) == len(r["estimates"]) == len(r["plans"])
    for p, e in zip(r["plans"], r["estimates"], strict=True):  # each row's estimate reproduces it
        assert e["memory_gib"]["total"] == pytest.approx(p["memory_gib_per_gpu"], rel=1e-9)
        assert e["cost_usd"] == pytest.approx(p["cost_usd"], rel=1e-9)
    assert r["command"].startswith("gpuplan plan --model llama3-8b --tokens 1T")
    assert r["commands"][0].startswith(f"gpuplan estimate --model llama3-8b --gpu "
                                       f"{r['plans'][0]['gpu']}")


def test_plan_view_with_a_null_config_reproduces_each_row(client):
    """`"config": null` is no config: the plan ran on `model`, so must every row's estimate
    (it once sent `config: null` with the model deleted and failed with "no model given")."""
    r = client.post("/api/plan?charts=1", json={**PLAN, "config": None, "top": 2})
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["estimates"] and len(doc["estimates"]) == len(doc["plans"])
    for p, e in zip(doc["plans"], doc["estimates"], strict=True):
        assert e["model"] == "llama3-8b"
        assert e["cost_usd"] == pytest.approx(p["cost_usd"], rel=1e-9)  # same inputs, same sum


def test_tco_and_catalog_and_validate(client, run_json):
    body = {"system": "dgx-h100", "nodes": 4, "utilization": 0.7, "compare_cloud": True}
    r = client.post("/api/tco?charts=1", json=body)
    assert r.status_code == 200 and "buy_rent" in r.json()["charts"]
    gpus = client.get("/api/catalog/gpus", params={"vendor": "amd"}).json()
    assert gpus == run_json("catalog", "gpus", "--vendor", "amd")
    assert {m["id"] for m in client.get("/api/catalog/models").json()} >= {"llama3-8b"}
    offers = client.get("/api/catalog/offers?gpu=h100-sxm").json()
    assert offers and all(o["accelerator"] == "h100-sxm" for o in offers)
    assert "runs" in client.get("/api/validate").json()


def test_openapi_lists_every_route_and_the_cli_fields(client):
    s = client.get("/openapi.json").json()
    assert s["openapi"].startswith("3.")
    for path in ("/api/plan", "/api/estimate", "/api/tco", "/api/catalog/gpus",
                 "/api/catalog/systems", "/api/catalog/offers", "/api/catalog/models",
                 "/api/validate"):
        assert path in s["paths"]
    props = s["paths"]["/api/plan"]["post"]["requestBody"]["content"]["application/json"][
        "schema"]["properties"]
    assert {"model", "tokens", "deadline_days", "budget_usd", "gpu", "export_region"} <= set(props)
    assert "catalog" not in props  # no server file paths from a request
    assert props["objective"]["enum"] == ["cost", "time", "energy"]


@pytest.mark.parametrize("command", ["plan", "estimate"])
def test_openapi_types_the_range_flags_with_their_bounds(client, command):
    """Each range type states its range (once years and pue, whose types the schema did not
    know by name, were plain strings)."""
    props = client.get("/openapi.json").json()["paths"][f"/api/{command}"]["post"][
        "requestBody"]["content"]["application/json"]["schema"]["properties"]
    strip = {k: {a: b for a, b in v.items() if a != "description"} for k, v in props.items()}
    assert strip["years"] == {"type": "number", "exclusiveMinimum": 0}
    assert strip["pue"] == {"type": "number", "minimum": 1}
    assert strip["utilization"] == strip["reuse"] == {"type": "number", "minimum": 0,
                                                      "maximum": 1}
    assert strip["electricity"] == {"type": "number", "minimum": 0}
    assert strip["global_batch"] == {"type": "integer", "minimum": 1}


def test_openapi_types_the_tco_inputs_with_the_range_tco_accepts(client):
    """tco's flags were plain floats: the schema now states `search.inputs.check_input`'s
    range for each, and a value just outside it is a 422 with the CLI's own line."""
    from gpuplan.cli.tco_cmd import SITE_FLAG_HELP
    from gpuplan.search.inputs import MIN_YEARS, check_input

    props = client.get("/openapi.json").json()["paths"]["/api/tco"]["post"][
        "requestBody"]["content"]["application/json"]["schema"]["properties"]
    strip = {k: {a: b for a, b in v.items() if a != "description"} for k, v in props.items()}
    assert strip["years"] == {"type": "number", "minimum": MIN_YEARS, "maximum": 100}
    assert strip["pue"] == {"type": "number", "minimum": 1, "maximum": 1e12}
    assert strip["utilization"] == {"type": "number", "minimum": 0.01, "maximum": 1}
    assert strip["nodes"] == {"type": "number", "exclusiveMinimum": 0, "maximum": 1e12}
    for name in ("nodes", "utilization", "price", "host_load_factor", *SITE_FLAG_HELP):
        s = strip[name]
        lo = s.get("minimum", s.get("exclusiveMinimum"))
        if "minimum" in s:
            check_input(name, lo)  # the bounds are what the rule accepts ...
        check_input(name, s["maximum"])
        for outside in (lo - 1e-9 if "minimum" in s else lo, s["maximum"] * (1 + 1e-9)):
            with pytest.raises(Exception, match="must be"):  # ... and just outside it refuses
                check_input(name, outside)
    for body in ({"pue": 0.5}, {"years": 0}, {"utilization": 0}, {"utilization": 1.5}):
        r = client.post("/api/tco", json={"system": "dgx-h100", **body})
        flag = "--" + next(iter(body))
        assert r.status_code == 422 and r.json()["error"].startswith(f"gpuplan: error: {flag} ")


@pytest.mark.parametrize("body, status, message", [
    ({"model": "llama3-8b"}, 422, "gpuplan: error: --tokens is required"),
    ({"model": "llama3-8b", "tokens": "1T", "gpu": "h10"}, 422, "did you mean 'h100-sxm'"),
    ({"modle": "llama3-8b"}, 422, "unknown field 'modle' for plan; did you mean 'model'?"),
    ({"model": "/etc/passwd.json", "tokens": "1T"}, 422, "is not a preset id"),
    ({"model": "..", "tokens": "1T"}, 422, "is not a preset id"),
    ({"catalog": ["/etc/x.toml"], "tokens": "1T"}, 422, "unknown field 'catalog'"),
    ({"model": "llama3-8b", "tokens": "1T", "objective": "speed"}, 422, "invalid choice"),
    ({"model": "llama3-8b", "tokens": "1T", "top": [1, 2]}, 422, "takes one value"),
    ({"model": "llama3-8b", "tokens": {"a": 1}}, 422, "takes a string or a number"),
    ({"model": "llama3-8b", "tokens": "1T", "allow_consumer": "yes"}, 422, "true or false"),
    ({"model": "llama3-8b", "tokens": "1T", "config": {"a": 1}}, 422, "not both"),
])
def test_bad_input_is_a_4xx_with_one_line(client, body, status, message):
    r = client.post("/api/plan", json=body)
    assert r.status_code == status
    err = r.json()["error"]
    assert message in err and "\n" not in err and "Traceback" not in err


def test_the_cli_says_the_same_line(client, run_cli):
    code, _, err = run_cli("plan", "--model", "llama3-8b", "--tokens", "1T", "--gpu", "h10")
    r = client.post("/api/plan", json={"model": "llama3-8b", "tokens": "1T", "gpu": "h10"})
    assert code == 2 and r.json()["error"] == err.strip()


def test_body_limits_and_malformed_json(client):
    assert client.post("/api/plan", content=b"{nope").status_code == 400
    assert client.post("/api/plan", content=b"[1, 2]").status_code == 422
    assert client.post("/api/plan", content=b'{"deadline_days": NaN}').status_code == 400
    big = json.dumps({"config": {"x": "a" * (1 << 20)}}).encode()
    r = client.post("/api/plan", content=big)
    assert r.status_code == 413 and r.json()["error"] == "request body larger than 1 MiB"
    assert client.get("/api/nothing").status_code in (404, 405)
    assert client.post("/api/validate", json={}).status_code == 404
    assert client.get("/static/../../etc/passwd").status_code == 404


def test_uploaded_config_is_used_and_its_temp_file_removed(client, tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
           "intermediate_size": 5632, "num_attention_heads": 32, "num_hidden_layers": 22,
           "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 2048,
           "tie_word_embeddings": False, "hidden_act": "silu"}
    r = client.post("/api/estimate", json={"config": cfg, "gpu": "h100-sxm", "gpus": 1})
    assert r.status_code == 200, r.text
    assert 1.0e9 < r.json()["params"] < 1.2e9  # TinyLlama-1.1B's shape
    assert list(tmp_path.iterdir()) == []
    r = client.post("/api/estimate", json={"config": {"model_type": "llama"}, "gpu": "h100-sxm"})
    assert r.status_code == 422 and "config.json" in r.json()["error"]
    assert str(tmp_path) not in r.json()["error"]


def test_time_limit_answers_4xx(monkeypatch):
    import time

    slow = TestClient(create_app(time_limit_s=0.05), raise_server_exceptions=False)
    monkeypatch.setattr(adapter, "call_api", lambda command, args: (time.sleep(0.3), {})[1])
    r = slow.post("/api/estimate", json=EST)
    assert r.status_code == 422 and "0.05 s limit" in r.json()["error"]


# --- fuzzing: random bodies built from the schema's own fields, never a 5xx -------------------

def _value():
    return st.one_of(st.none(), st.booleans(), st.integers(-10, 10**6),
                     st.floats(allow_nan=False, allow_infinity=False),
                     st.sampled_from(["llama3-8b", "h100-sxm", "1T", "0", "-1", "nan", "inf",
                                      "1e400", "cn", "own", "spot", "dgx-h100", "", "--help",
                                      # the values of the #11-#15 fields, good and junk
                                      "lora", "qlora", "freeze", "nf4", "torchtitan", "params",
                                      "optimizer,junk", "core_attn,mlp", "moe", "1e300", "0.9",
                                      "mi300x"]),
                     st.text(max_size=12), st.lists(st.sampled_from(["h100-sxm", "x", "spot"]),
                                                    max_size=2))


def _bodies(command):
    names = [n for n in adapter.fields(command) if n != "config"] + ["bogus"]
    return st.dictionaries(st.sampled_from(names), _value(), max_size=6)


BASE = {"estimate": {"model": "llama3-8b", "gpu": "h100-sxm"},
        "plan": {"model": "llama3-8b", "tokens": "1B", "gpu": ["h100-sxm"], "max_gpus": 16},
        "tco": {"system": "dgx-h100", "utilization": 0.5}}


@pytest.mark.parametrize("command", ["estimate", "plan", "tco"])
@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_no_server_error(client, command, data):
    body = {**BASE[command], **data.draw(_bodies(command))}
    r = client.post(f"/api/{command}", json=body)
    assert r.status_code < 500, (body, r.text)
    if r.status_code >= 400:
        err = r.json()["error"]
        assert "\n" not in err and "Traceback" not in err


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1"])
def test_serve_refuses_a_time_limit_that_is_not_a_positive_number(run_cli, monkeypatch, value):
    """`--time-limit nan` once passed the `<= 0` check and served with no limit."""
    import uvicorn

    def never(*a, **k):
        raise AssertionError("the server started")

    monkeypatch.setattr(uvicorn, "run", never)
    code, out, err = run_cli("serve", f"--time-limit={value}")
    assert code == 2 and out == ""
    assert err.startswith("gpuplan serve: error: argument --time-limit: ") and "\n" not in \
        err.rstrip("\n")
