"""pdshm.mpi's element helpers, without MPI: what crosses hosts must be
converted and divided exactly as the group's own reduction does."""
import numpy as np
import pytest

# installed with the module only where configure found MPI and mpi4py
pm = pytest.importorskip("pdshm.mpi")


def test_integer_mean_truncates_towards_zero_as_the_group_does():
    a = np.array([-9, -8, -7, -1, 0, 1, 7, 8, 9], np.int64)
    pm._divide(a, "int64", 4)
    assert a.tolist() == [-2, -2, -1, 0, 0, 0, 1, 2, 2]


def test_int32_extremes_divide_without_overflow():
    a = np.array([np.iinfo(np.int32).min, np.iinfo(np.int32).max], np.int32)
    pm._divide(a, "int32", 3)
    assert a.tolist() == [-715827882, 715827882]


def test_bfloat16_rounds_to_nearest_even_as_torch_does():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    f = np.concatenate([rng.standard_normal(4096).astype(np.float32) * 100,
                        np.array([0.0, -0.0, np.inf, -np.inf, 1.00390625, 1.01171875],
                                 np.float32)])
    want = torch.from_numpy(f).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(pm._bf16_narrow(f), want)


def test_bfloat16_nan_stays_a_quiet_nan():
    out = pm._bf16_narrow(np.array([np.nan], np.float32))
    assert np.isnan(pm._bf16_widen(out))[0]


def test_float16_words_widen_and_narrow_back_unchanged():
    words = np.arange(0, 0x7C00, 7, dtype=np.uint16)  # every 7th finite positive float16
    back = pm._NARROW["float16"](pm._WIDEN["float16"](words))
    assert np.array_equal(back, words)
