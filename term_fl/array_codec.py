"""Flower ``Array`` <-> numpy, byte-identical to Flower's codec, without re-parsing headers.

Flower stores an ``Array`` as the ``.npy`` bytes of the array
(``np.save(..., allow_pickle=False)``) and decodes it with ``np.load``, which
parses the header (``ast.literal_eval``) every time. A federated round moves
the same few shapes over and over, so this module builds each
``(dtype, shape)`` header once with ``np.save`` and then

- encodes a C-contiguous array as ``header + array.tobytes()`` (exactly the
  bytes ``np.save`` writes), and
- decodes data whose first bytes are that header with ``np.frombuffer``.

Anything else (another serialisation type, a Fortran-order or byte-swapped
``.npy``, object arrays, a truncated buffer) goes through Flower's own
``Array(ndarray)`` / ``Array.numpy()``, so the result never differs from
Flower's, only the time does.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping

import numpy as np
from flwr.app import Array, ArrayRecord

NUMPY_STYPE = "numpy.ndarray"  # flwr's SType.NUMPY
_MAX_HEADERS = 1024
_headers: dict[tuple[str, tuple[int, ...]], bytes] = {}


def _header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """The ``.npy`` header ``np.save`` writes for a C-ordered array of this dtype and shape."""
    key = (dtype.str, shape)
    header = _headers.get(key)
    if header is None:
        buffer = io.BytesIO()
        np.save(buffer, np.empty(shape, dtype=dtype), allow_pickle=False)
        data = buffer.getvalue()
        header = data[: len(data) - dtype.itemsize * math.prod(shape)]
        if len(_headers) >= _MAX_HEADERS:
            _headers.clear()
        _headers[key] = header
    return header


def to_array(value: np.ndarray) -> Array:
    """A Flower ``Array`` holding ``value`` (the bytes ``Array(value)`` would hold)."""
    value = np.asarray(value)
    if value.dtype.hasobject or not value.flags.c_contiguous:
        return Array(value)
    shape = value.shape
    data = _header(value.dtype, shape) + value.tobytes()
    return Array(dtype=str(value.dtype), shape=shape, stype=NUMPY_STYPE, data=data)


def from_array(array: Array) -> np.ndarray:
    """The numpy array an ``Array`` holds (a writable copy, like ``Array.numpy()``)."""
    if array.stype == NUMPY_STYPE:
        try:
            dtype = np.dtype(array.dtype)
        except TypeError:
            dtype = None
        if dtype is not None and not dtype.hasobject:
            shape = tuple(array.shape)
            header = _header(dtype, shape)
            data = array.data
            if len(data) == len(header) + dtype.itemsize * math.prod(shape) and data.startswith(header):
                return np.frombuffer(data, dtype=dtype, offset=len(header)).reshape(shape).copy()
    return array.numpy()


def to_array_record(arrays: Mapping[str, np.ndarray]) -> ArrayRecord:
    """An ``ArrayRecord`` of ``arrays`` (keys in order).

    Filled item by item: ``ArrayRecord(dict_of_arrays)`` would copy every
    ``Array`` once more.
    """
    record = ArrayRecord()
    for key, value in arrays.items():
        record[key] = to_array(value)
    return record


def from_array_record(record: ArrayRecord) -> dict[str, np.ndarray]:
    """The arrays of a record as numpy (keys in order); the record is left intact."""
    return {key: from_array(array) for key, array in record.items()}
