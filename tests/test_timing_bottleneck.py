"""`timing.bottleneck_code` equals the stacked argmax it replaces (#11/#12)."""

import numpy as np
import pytest

from gpuplan.estimators.timing import BOTTLENECKS, bottleneck_code


def _stacked_argmax(parts):
    return np.argmax(np.stack(np.nan_to_num(np.broadcast_arrays(*parts), nan=0.0)), axis=0)


@pytest.mark.parametrize("seed", range(5))
def test_equals_stacked_argmax_on_random_rows(seed):
    rng = np.random.default_rng(seed)
    shape = (3, 2000)
    # few distinct values, so that ties are frequent; nan, inf and 0 sprinkled in
    parts = [rng.integers(0, 4, shape).astype(float) for _ in BOTTLENECKS]
    for p in parts:
        p[rng.random(shape) < 0.05] = np.nan
        p[rng.random(shape) < 0.02] = np.inf
    parts = np.broadcast_arrays(*parts)
    got = bottleneck_code(parts)
    assert got.dtype == np.intp
    np.testing.assert_array_equal(got, _stacked_argmax(parts))


def test_scalar_rows():
    parts = np.broadcast_arrays(1.0, np.nan, 3.0, 3.0, 0.0, 2.0, np.nan, 1.0)
    assert bottleneck_code(parts) == _stacked_argmax(parts) == 2
    parts = np.broadcast_arrays(*([np.nan] * 8))
    assert bottleneck_code(parts) == 0
