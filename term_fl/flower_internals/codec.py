"""The Array codec: numpy arrays to and from Flower ``Array`` / ``ArrayRecord`` / ``MetricRecord``.

Flower stores an Array as the .npy bytes of the array (``np.save(...,
allow_pickle=False)``) and decodes it with ``np.load``, which parses the
header (``ast.literal_eval``) every time. A federated round moves the same
few shapes over and over: each (dtype, shape) header is built once with
``np.save``, a C-contiguous array is encoded as header + ``array.tobytes()``
(exactly the bytes ``np.save`` writes) and data whose first bytes are that
header are decoded with ``np.frombuffer``. Anything else (another
serialisation type, Fortran order, byte-swapped, object arrays, a truncated
buffer) goes through Flower's own code, and so does everything when the
gate's fast paths are off (:func:`term_fl.flower_internals.gate.fast_paths`).

Private names the fast paths use: the fields of ``Array`` (``dtype``,
``shape``, ``stype``, ``data``, set as its constructor sets them) and the
``_data`` dictionary of ``ArrayRecord`` and ``MetricRecord``. Only public
``flwr.app`` names are imported.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping

import numpy as np
from flwr.app import Array, ArrayRecord, MetricRecord

from .gate import fast_paths

__all__ = ["NUMPY_STYPE", "from_array", "from_array_record", "metric_record", "to_array", "to_array_record"]

NUMPY_STYPE = "numpy.ndarray"  # flwr's SType.NUMPY
_MAX_HEADERS = 1024
# Keyed by the dtype itself: dtype.str is the same for different structured dtypes of one size ('|V8').
_headers: dict[tuple[np.dtype, tuple[int, ...]], bytes] = {}
_dtype_names: dict[np.dtype, str] = {}


def _dtype_name(dtype: np.dtype) -> str:
    """``str(dtype)``, what an ``Array`` stores as its dtype, once per dtype (numpy builds it in Python)."""
    name = _dtype_names.get(dtype)
    if name is None:
        name = str(dtype)
        if len(_dtype_names) < _MAX_HEADERS:
            _dtype_names[dtype] = name
    return name


def _header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """The ``.npy`` header ``np.save`` writes for a C-ordered array of this dtype and shape."""
    key = (dtype, shape)
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


def to_array(value: np.ndarray, *, fast: bool | None = None) -> Array:
    """A Flower ``Array`` holding ``value`` (the bytes ``Array(value)`` would hold).

    The fast path also skips ``Array.__init__``'s argument dispatch and checks
    (its fields are set as that constructor sets them). ``fast``: the caller's
    :func:`fast_paths` (asked here when None).
    """
    value = np.asarray(value)
    if value.dtype.hasobject or not value.flags.c_contiguous or not (fast_paths() if fast is None else fast):
        return Array(value)
    shape, dtype = value.shape, value.dtype
    array = Array.__new__(Array)
    array.__dict__.update(
        dtype=_dtype_name(dtype), shape=shape, stype=NUMPY_STYPE, data=_header(dtype, shape) + value.tobytes()
    )
    return array


def from_array(array: Array) -> np.ndarray:
    """The numpy array an ``Array`` holds (a writable copy, like ``Array.numpy()``)."""
    if array.stype == NUMPY_STYPE and fast_paths():
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
    ``Array`` once more; the fast path fills its dictionary directly (the keys
    are strings and the values Arrays, which is all its checks check).
    """
    record = ArrayRecord()
    if fast_paths():
        record.__dict__["_data"] = {str(key): to_array(value, fast=True) for key, value in arrays.items()}
        return record
    for key, value in arrays.items():
        record[key] = to_array(value)
    return record


def from_array_record(record: ArrayRecord) -> dict[str, np.ndarray]:
    """The arrays of a record as numpy (keys in order); the record is left intact (no ``gc.collect``)."""
    return {key: from_array(array) for key, array in record.items()}


def metric_record(values: Mapping[str, int | float]) -> MetricRecord:
    """A ``MetricRecord`` of the ints and floats a client computed.

    ``MetricRecord(values)`` checks every key and value in Python (a cost per
    reply that matters when a round answers thousands of messages); the fast
    path fills its dictionary directly, after one check that every value is a
    plain int or float (anything else takes Flower's checked constructor, and
    its error).
    """
    if fast_paths() and all(type(v) in (int, float) and type(k) is str for k, v in values.items()):
        record = MetricRecord()
        record.__dict__["_data"] = dict(values)
        return record
    return MetricRecord(dict(values))
