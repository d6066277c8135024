"""term_fl.flower_internals' Array codec gives exactly Flower's Array bytes and values, faster; odd inputs fall back to Flower."""

from __future__ import annotations

import io

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord

from term_fl.flower_internals import from_array, from_array_record, to_array, to_array_record

ARRAYS = [
    np.arange(12, dtype=np.float32).reshape(3, 4),
    np.linspace(-1.0, 1.0, 7),  # float64
    np.array([[1, -2], [3, 4]], dtype=np.int64),
    np.zeros((0, 5), dtype=np.float32),
    np.array(2.5, dtype=np.float32),  # 0-d
    np.ones((2, 3, 4), dtype=np.float16),
    np.array([True, False]),
]


@pytest.mark.parametrize("value", ARRAYS, ids=lambda a: f"{a.dtype}{a.shape}")
def test_encoding_is_byte_identical_to_flowers(value):
    ours, flowers = to_array(value), Array(value)
    assert (ours.dtype, ours.shape, ours.stype, ours.data) == (flowers.dtype, flowers.shape, flowers.stype, flowers.data)


@pytest.mark.parametrize("value", ARRAYS, ids=lambda a: f"{a.dtype}{a.shape}")
def test_decoding_equals_flowers_and_gives_a_writable_copy(value):
    flowers = Array(value)
    decoded = from_array(flowers)
    expected = flowers.numpy()
    assert decoded.dtype == expected.dtype and decoded.shape == expected.shape
    assert np.array_equal(decoded, expected)
    assert decoded.flags.writeable
    decoded[...] = 0  # must not touch the record's bytes
    assert np.array_equal(from_array(flowers), expected)


def test_the_same_shape_reuses_its_header_and_different_values_still_round_trip():
    rng = np.random.default_rng(0)
    for _ in range(5):
        value = rng.normal(size=(4, 3)).astype(np.float32)
        assert np.array_equal(from_array(to_array(value)), value)


def _npy(value: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, value, allow_pickle=False)
    return buffer.getvalue()


def test_fortran_order_and_big_endian_data_are_decoded_by_flowers_path():
    fortran = np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    swapped = np.arange(4, dtype=">f8")
    for value in (fortran, swapped):
        array = Array(dtype=str(value.dtype), shape=value.shape, stype="numpy.ndarray", data=_npy(value))
        assert np.array_equal(from_array(array), value)


def test_non_contiguous_arrays_encode_like_flower():
    value = np.arange(20, dtype=np.float32).reshape(4, 5)[:, ::2]
    assert to_array(value).data == Array(value).data
    assert np.array_equal(from_array(to_array(value)), value)


def test_data_that_does_not_match_the_declared_shape_is_left_to_flower_and_fails_as_there():
    good = Array(np.arange(6, dtype=np.float32))
    truncated = Array(dtype=good.dtype, shape=good.shape, stype=good.stype, data=good.data[:-4])
    with pytest.raises(ValueError):
        from_array(truncated)
    with pytest.raises(ValueError):
        truncated.numpy()


def test_another_serialisation_type_is_refused_as_by_flower():
    array = Array(dtype="float32", shape=(2,), stype="torch.Tensor", data=b"\x00" * 8)
    with pytest.raises(TypeError, match="Unsupported serialization type"):
        from_array(array)


def test_records_keep_key_order_and_values():
    arrays = {"w": np.ones((2, 2), dtype=np.float32), "b": np.zeros(2, dtype=np.float32)}
    record = to_array_record(arrays)
    assert isinstance(record, ArrayRecord) and list(record) == ["w", "b"]
    assert {k: v.data for k, v in record.items()} == {k: Array(v).data for k, v in arrays.items()}
    decoded = from_array_record(record)
    assert list(decoded) == ["w", "b"] and all(np.array_equal(decoded[k], arrays[k]) for k in arrays)
