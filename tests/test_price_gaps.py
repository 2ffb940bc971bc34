"""Issue 14, the catalog's price gaps: commitment prices (AWS Savings Plans, GCP committed use,
Azure reserved), China-region clouds with their currency conversion, and the date check."""

from __future__ import annotations

import pytest

from gpuplan.catalog import load_catalog
from gpuplan.errors import CatalogError


@pytest.mark.parametrize("date", ["2026-01\n", "2026-01-02\n", " 2026-01", "2026-1"])
def test_a_date_with_trailing_text_is_rejected(tmp_path, date):
    """catalog dates are matched whole: a trailing newline is not a date (was accepted)."""
    path = tmp_path / "o.toml"
    path.write_text(f'[[offer]]\nid = "aws-p5.48xlarge-us-east-1"\nas_of = {date!r}\n'
                    .replace("'", '"'))
    with pytest.raises(CatalogError, match="as_of must be a date YYYY-MM-DD or YYYY-MM"):
        load_catalog([str(path)])
