"""The detectors' fast paths give the same bits as the general arithmetic they skip."""

from __future__ import annotations

import numpy as np
import pytest

from prexid.detectors.base import batch_rows, ewma_weight, half_life_weight, rows, unique_rounds
from prexid.detectors.variance import VarianceShift


def general(dt: np.ndarray, half_life: float, n: np.ndarray, plus: float) -> np.ndarray:
    return np.maximum(half_life_weight(dt, half_life), 1.0 / np.maximum(n + plus, 1.0))


def bits(a: np.ndarray | float, size: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(a, dtype=np.float64), (size,)).view(np.int64)


@pytest.mark.parametrize("plus", [0.0, 1.0])
@pytest.mark.parametrize(
    "n",
    [
        np.full(50, 5000.0),  # past the running mean's pace: the scrape's one weight
        np.full(50, 40.0),  # started together, still young: one weight, the mean's
        np.arange(50.0) * 7,  # mixed ages, some young
        np.r_[np.full(49, 5000.0), 0.0],  # one series new
        np.r_[np.full(49, 5000.0), np.nan],  # a corrupt count: the general path
        np.full(50, 0.0),
    ],
)
@pytest.mark.parametrize("dt", [np.full(50, 15.0), np.r_[np.full(49, 15.0), 16.0], np.full(50, 0.0)])
@pytest.mark.parametrize("half_life", [3600.0, 10.0])
def test_ewma_weight_is_the_general_formula_bit_for_bit(
    dt: np.ndarray, n: np.ndarray, plus: float, half_life: float
) -> None:
    got = ewma_weight(dt, half_life, n, plus=plus)
    assert np.array_equal(bits(got, len(n)), bits(general(dt, half_life, n, plus), len(n)))
    again = ewma_weight(dt, half_life, n, plus=plus, least=float(n.min()))
    assert np.array_equal(bits(again, len(n)), bits(got, len(n)))


def test_ewma_weight_is_one_number_only_where_it_may_be() -> None:
    dt = np.full(8, 15.0)
    assert isinstance(ewma_weight(dt, 1800.0, np.full(8, 500.0)), float)
    assert isinstance(ewma_weight(dt, 1800.0, np.full(8, 3.0)), float)
    assert isinstance(ewma_weight(dt, 1800.0, np.r_[np.full(7, 500.0), 3.0]), np.ndarray)
    assert isinstance(ewma_weight(np.r_[dt[:7], 14.0], 1800.0, np.full(8, 500.0)), np.ndarray)


def test_batch_rows_answers_for_that_array_only() -> None:
    ids = np.arange(10, 20, dtype=np.int64)
    twin = ids.copy()
    twin[3] = 99  # same object shape, other content: never answered from the batch's
    with batch_rows(ids) as at:
        assert at == slice(10, 20)
        assert rows(ids) is at
        assert isinstance(rows(twin), np.ndarray)
        assert len(list(unique_rounds(twin, np.zeros(10)))) == 1
    scattered = np.array([3, 1, 2], dtype=np.int64)
    with batch_rows(scattered) as at:
        assert at is scattered and rows(scattered) is scattered
    assert rows(ids) == slice(10, 20)  # outside: worked out again


def test_variance_z_of_some_series_is_theirs_of_all() -> None:
    det, rng = VarianceShift(), np.random.default_rng(3)
    size = 1000
    short, ref = rng.gamma(2.0, 1.0, size), rng.gamma(2.0, 1.0, size)
    a_short, a_long = rng.uniform(0.001, 0.01, size), rng.uniform(1e-4, 1e-3, size)
    judged = rng.random(size) < 0.3
    everyone = det._z(np.ones(size, dtype=bool), a_short, a_long, short, ref)
    some = det._z(judged, a_short, a_long, short, ref)
    assert np.array_equal(some[judged].view(np.int64), everyone[judged].view(np.int64))
    assert np.isnan(some[~judged]).all()
    one = det._z(judged, 0.004, 0.0005, short, ref)  # the scrape's one weight, as numbers
    arrays = det._z(judged, np.full(size, 0.004), np.full(size, 0.0005), short, ref)
    assert np.array_equal(one[judged].view(np.int64), arrays[judged].view(np.int64))
