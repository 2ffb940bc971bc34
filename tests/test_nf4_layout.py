"""The estimate's NF4 bytes per parameter against bitsandbytes' storage layout, by arithmetic
(no torch needed: `calibrate.torch_terms.nf4_bytes`; tests_torch checks that layout against
bitsandbytes' own quantize_4bit when it is installed)."""

from __future__ import annotations

import pytest

from gpuplan.calibrate.torch_terms import nf4_bytes
from gpuplan.estimators.finetune import QUANT_BYTES


@pytest.mark.parametrize("shape", [(4096, 4096), (4096, 14336), (8192, 28672)])
def test_nf4_bytes_per_param_is_the_layout_without_per_tensor_tables(shape):
    """Llama matrices: packed 4-bit values + uint8 block scales + fp32 second-level scales
    equal QUANT_BYTES['nf4'] exactly; the per-tensor lookup tables and mean (1,092 B) are
    what the per-parameter figure leaves out (0.013% of a 4096 x 4096 matrix)."""
    n = shape[0] * shape[1]
    per_tensor = 4 + 4 * (16 + 256)
    assert nf4_bytes(n) - per_tensor == n * QUANT_BYTES["nf4"]
    assert per_tensor / nf4_bytes(n) < 2e-4
