"""`timing.bottleneck_code` and `timing.choose` equal the numpy calls they replace (#11/#12)."""

import numpy as np
import pytest

from gpuplan.estimators.compute import OPTIMIZER_STEP_BYTES
from gpuplan.estimators.timing import BOTTLENECKS, bottleneck_code, choose


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


@pytest.mark.parametrize("seed", range(5))
def test_choose_equals_np_choose(seed):
    rng = np.random.default_rng(seed)
    table = rng.random((3, 1, 4))  # (groups, 1, codes), as timed._stacked holds a peak table
    table[rng.random(table.shape) < 0.2] = np.nan
    choices = [table[..., i] for i in range(4)]
    for high in (1, 2, 4):  # one code present, some, all
        index = rng.integers(0, high, 500)
        np.testing.assert_array_equal(choose(choices, index), np.choose(index, choices))
        assert choose(choices, index).shape == np.choose(index, choices).shape
    index = rng.integers(0, 3, 500)
    got = choose(OPTIMIZER_STEP_BYTES, index)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, np.choose(index, OPTIMIZER_STEP_BYTES))


def test_choose_scalar_and_bad_codes():
    assert choose((1.0, 2.0, 3.0), 2) == 3.0
    with pytest.raises(ValueError):
        choose((1.0, 2.0), np.array([0, 2]))
    assert choose((1.0, 2.0), np.array([], dtype=int)).shape == (0,)
