"""`userfile.read_text`: each way of failing to read a user's file is one line of the chosen
GpuplanError subclass; the path is shown on one line of at most 80 characters."""

from __future__ import annotations

import pytest

from gpuplan.errors import CatalogError, ConfigError
from gpuplan.userfile import display_path, read_text


def message(path, **kw) -> str:
    with pytest.raises(ConfigError) as err:
        read_text(path, "model config", "give a config.json", error=ConfigError, **kw)
    return str(err.value)


def test_missing_folder_and_encoding(tmp_path):
    missing = tmp_path / "nope.json"
    assert message(missing) == f"model config '{missing}' does not exist; check the path"
    assert message(tmp_path) == f"model config '{tmp_path}' is a folder; give a config.json"
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"a": "\xff"}')
    assert message(bad) == f"model config '{bad}' is not UTF-8 text (byte 7); save it as UTF-8"


def test_long_and_unprintable_paths_are_one_short_line(tmp_path):
    long = str(tmp_path / ("a" * 5000 + ".json"))
    text = message(long)
    assert text == (f"model config '{long[:77]}...' cannot be opened (File name too long); "
                    "check the path")
    assert display_path("a\nb") == "a\\nb"
    assert message("x\0y", shown="given").startswith("model config 'given' cannot be opened (")


def test_text_and_byte_order_mark(tmp_path):
    path = tmp_path / "f.csv"
    path.write_bytes(b"\xef\xbb\xbfA,B\n")
    assert read_text(path, "price file", "give a CSV", encoding="utf-8-sig") == "A,B\n"
    assert read_text(path, "price file", "give a CSV") == "\ufeffA,B\n"
    with pytest.raises(CatalogError, match="^price file '.*' is a folder; give a CSV$"):
        read_text(tmp_path, "price file", "give a CSV")


def test_a_file_over_max_bytes_is_refused_before_reading(tmp_path):
    path = tmp_path / "big.json"
    path.write_bytes(b"x" * 1001)
    assert message(path, max_bytes=1000) == (f"model config '{path}' is over 1,000 bytes; "
                                             "give a config.json")
    assert read_text(path, "f", "h", max_bytes=1001) == "x" * 1001
    assert message(tmp_path / "nope", max_bytes=2**20).endswith("does not exist; check the path")
