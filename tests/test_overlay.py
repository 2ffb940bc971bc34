"""Overlays: merged field by field with provenance, and every bad overlay is one clear line
(issues #9 and #10). Each case below crashed a command or was silently accepted before."""

from __future__ import annotations

import datetime
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.catalog import ENV_VAR, load_catalog, validate_file
from gpuplan.errors import CatalogError

P5 = "aws-p5.48xlarge-us-east-1"


def write(tmp_path, text: str | bytes, name: str = "overlay.toml") -> str:
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    return str(p)


def error_of(path: str) -> str:
    with pytest.raises(CatalogError) as err:
        validate_file(path)
    text = str(err.value)
    assert "\n" not in text and len(text) < 300
    return text


# --- bad overlays: the exact message -----------------------------------------------------------

CASES = [
    ('[[system]]\nid = "dgx-h100"\ngpus_per_node = 0\n',
     "system 'dgx-h100': gpus_per_node must be a whole number in 1..100000, got 0"),
    ('[[model]]\nid = "llama2-7b"\nmax_seq_len = 0\n',
     "model 'llama2-7b': max_seq_len must be a whole number in 1..100000000, got 0"),
    ('[efficiency.h100]\nmatmul_max = "abc"\n',
     "efficiency 'h100': matmul_max must be a number, got 'abc'"),
    ("[efficiency.h100]\nattention_ratoi = 0.1\n",
     "efficiency 'h100': unknown field 'attention_ratoi'; did you mean 'attention_ratio'? "
     "(units are part of field names, e.g. memory_gib, peak_tflops)"),
    ("[efficiency.h100]\nmatmul_max = 1.5\n",
     "efficiency 'h100': matmul_max must be a finite number in (0, 1], got 1.5"),
    ('[scenarios.startup]\nnodes = "x"\n',
     "scenario 'startup': nodes must be a whole number in 1..1000000, got 'x'"),
    ('[scenarios.startup]\ntokens = "lots"\n',
     "scenario 'startup': tokens must be a count such as 300B or 1.5e13, got 'lots'"),
    ('[scenarios.startup]\nmodel = "llama9"\n',
     "scenario 'startup': unknown model 'llama9'; did you mean 'llama3-8b' or 'llama2-7b' or "
     "'llama3-70b'? `gpuplan models` lists them"),
    ('[[accelerator]]\nid = "h100-sxm"\nmemory_gib = 1e300\n',
     "accelerator 'h100-sxm': memory_gib must be a finite number in (0, 1e+06], got 1e+300"),
    ('[[offer]]\nid = "aws-p5.48xlarge-us-east-1"\nusd_per_hour = { spot = inf }\n',
     "offer 'aws-p5.48xlarge-us-east-1': usd_per_hour.spot must be a finite number >= 0, "
     "got inf"),
    ('[[offer]]\nid = "aws-p5.48xlarge-us-east-1"\nnetwork_gbit_per_s = -1\n',
     "offer 'aws-p5.48xlarge-us-east-1': network_gbit_per_s must be a finite number "
     "in [0, 1e+09], got -1"),
    ('[[offer]]\nid = "aws-p5.48xlarge-us-east-1"\nnetwork_gbit_per_s = 0\n',
     "offer 'aws-p5.48xlarge-us-east-1': network_gbit_per_s = 0 (no inter-instance fabric) "
     "needs max_instances = 1"),
    ("[site.pue]\nvalue = 0.5\n", "site 'pue': value must be a finite number in [1, 10], got 0.5"),
    ("[site.utilization]\nvalue = 0\n",
     "site 'utilization': value must be a finite number in (0, 1], got 0"),
    ("[site.electricity_usd_per_kw]\nvalue = 0.1\n",
     "unknown site value 'electricity_usd_per_kw'; did you mean 'electricity_usd_per_kwh'? "
     "(`gpuplan catalog site` lists them)"),
    ('[efficiency.h200]\ninherits = "h1000"\n',
     "efficiency 'h200': inherits unknown family 'h1000'; did you mean 'h100'?"),
    ("[efficiency.my-family]\nmatmul_max = 0.5\n",
     "efficiency 'my-family': missing field 'guess'"),
    ('[efficiency.my-family]\nmatmul_max = 0.5\nguess = true\nsource = "me"\nas_of = "2026-01"\n',
     "efficiency 'my-family': missing field 'half_dim'; give it or take it from another family "
     'with inherits = "ID"'),
    ('[[model]]\nid = "llama2-7b"\ndense_layers = 99\n',
     "model 'llama2-7b': dense_layers must be at most layers"),
    ("[efficency.h100]\nmatmul_max = 0.5\n", "unknown table 'efficency'; did you mean "
     "'efficiency'? (tables: accelerator, fabric, system, pod, offer, model, site, efficiency, "
     "scenarios, stack, residuals, memory)"),
]


@pytest.mark.parametrize("text, message", CASES, ids=[m.split(":")[0] + " " + m.split(" ")[2]
                                                      for _, m in CASES])
def test_bad_overlay_is_one_exact_line(tmp_path, text, message):
    path = write(tmp_path, text)
    assert error_of(path) == f"{path}: {message}"


def test_inheritance_loop_names_the_overlay(tmp_path):
    path = write(tmp_path, '[efficiency.h100]\ninherits = "h200"\n')
    assert error_of(path) == (f"{path}: efficiency inherits forms a loop (h100 -> h200 -> h100);"
                              " remove one inherits")


def test_file_that_is_not_utf8(tmp_path):
    path = write(tmp_path, b'\xff\xfe[[offer]]\nid = "x"\n')
    assert error_of(path) == (f"catalog file '{path}' is not UTF-8 text (byte 0); "
                              "save it as UTF-8")


def test_missing_file_and_folder(tmp_path):
    missing = str(tmp_path / "nope.toml")
    assert error_of(missing) == f"catalog file '{missing}' does not exist; check the path"
    folder = tmp_path / "dir.toml"
    folder.mkdir()
    assert error_of(str(folder)) == f"catalog file '{folder}' is a folder; give a .toml file"


def test_path_too_long_for_the_os(tmp_path, monkeypatch):
    long = str(tmp_path / ("a" * 5000 + ".toml"))
    shown = long[:77] + "..."
    expected = f"catalog file '{shown}' cannot be opened (File name too long); check the path"
    assert error_of(long) == expected
    monkeypatch.setenv(ENV_VAR, long)
    with pytest.raises(CatalogError) as err:
        load_catalog()
    assert str(err.value) == expected


def test_cli_prints_one_line_and_exits_2(tmp_path, run_cli):
    path = write(tmp_path, "[efficiency.h100]\nattention_ratoi = 0.1\n")
    code, out, err = run_cli("plan", "--model", "llama2-7b", "--tokens", "1T", "--catalog", path)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "did you mean 'attention_ratio'" in err


# --- merging per field, with provenance ------------------------------------------------------

README_EXAMPLE = f"""
[[offer]]
id = "{P5}"
usd_per_hour = {{ "on-demand" = 40.0, "reserved-1y" = 30.0 }}
"""


def test_readme_overlay_keeps_the_other_prices_and_records_its_file(tmp_path):
    base = load_catalog().offer(P5)
    path = write(tmp_path, README_EXAMPLE)
    cat = load_catalog([path])
    offer = cat.offer(P5)
    assert offer.usd_per_hour == {**base.usd_per_hour, "on-demand": 40.0, "reserved-1y": 30.0}
    assert "spot" in offer.usd_per_hour and "reserved-3y" in offer.usd_per_hour
    assert offer.source.startswith(f"{path} sets usd_per_hour.on-demand, "
                                   f"usd_per_hour.reserved-1y; other values: ")
    assert base.source in offer.source
    mtime_date = datetime.date.fromtimestamp(os.stat(path).st_mtime).isoformat()
    assert offer.as_of == mtime_date
    assert cat.overlay_values("offer", P5) == {
        "usd_per_hour.on-demand": path, "usd_per_hour.reserved-1y": path,
        "source": path, "as_of": path}


def test_overlay_with_its_own_source_keeps_it(tmp_path):
    text = README_EXAMPLE + 'source = "our contract"\nas_of = "2026-10"\n'
    offer = load_catalog([write(tmp_path, text)]).offer(P5)
    assert (offer.source, offer.as_of) == ("our contract", "2026-10")


def test_catalog_show_names_the_overlay_file(tmp_path, run_cli):
    path = write(tmp_path, README_EXAMPLE)
    code, out, _ = run_cli("catalog", "show", P5, "--catalog", path)
    assert code == 0
    assert "values set by overlay files (field: file):" in out
    assert f"    {'usd_per_hour.on-demand':32} {path}" in out
    code, out, _ = run_cli("catalog", "show", P5, "--catalog", path, "--json")
    assert json.loads(out)["overlay_values"]["usd_per_hour.reserved-1y"] == path


def test_efficiency_overlay_reaches_the_families_that_inherit(tmp_path):
    path = write(tmp_path, "[efficiency.h100]\nattention_ratio = 0.5\n")
    eff = load_catalog([path]).table("efficiency")
    assert eff["h100"]["attention_ratio"] == 0.5
    assert eff["h200"]["attention_ratio"] == 0.5  # h200 inherits h100
    assert eff["gb300"]["attention_ratio"] == 0.5  # gb300 -> gb200 -> h100
    # a row that does not inherit keeps its own value (the built-in catalog's)
    assert eff["a100"]["attention_ratio"] == load_catalog().table("efficiency")["a100"][
        "attention_ratio"] != 0.5


# merge property: an overlay that sets one field changes that field (and the entry's source and
# as_of, which now name the overlay), nothing else in the whole catalog.
FIELDS = [("accelerator", "h100-sxm", "tdp_watts", "tdp_watts", 1.0),
          ("system", "dgx-h100", "max_power_watts", "max_power_watts", 1.0),
          ("fabric", "nvlink4", "latency_us", "latency_s", 1e-6),
          ("offer", P5, "usd_per_hour.spot", "usd_per_hour.spot", 1.0)]


def _snapshot(cat):
    out = {}
    for kind, table in cat.tables().items():
        for ident, obj in table.items():
            d = obj if isinstance(obj, dict) else obj.__dict__
            for k, v in d.items():
                if isinstance(v, dict):
                    out.update({(kind, ident, f"{k}.{s}"): x for s, x in v.items()})
                else:
                    out[(kind, ident, k)] = v
    return out


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=st.sampled_from(FIELDS), value=st.floats(min_value=0.5, max_value=1e4))
def test_overlay_of_one_field_changes_only_that_field(tmp_path, case, value):
    kind, ident, path, attr, factor = case
    key, _, sub = path.partition(".")
    table = f'[[{kind}]]\nid = "{ident}"\n'
    line = f'{key} = {{ "{sub}" = {value!r} }}' if sub else f"{key} = {value!r}"
    overlay = write(tmp_path, table + line + "\n", name=f"p{abs(hash((case, value)))}.toml")
    before, after = _snapshot(load_catalog()), _snapshot(load_catalog([overlay]))
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    assert changed <= {(kind, ident, attr), (kind, ident, "source"), (kind, ident, "as_of")}
    assert after[(kind, ident, attr)] == pytest.approx(value * factor, rel=1e-12)
