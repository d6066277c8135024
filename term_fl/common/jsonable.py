"""One JSON sanitiser: plain JSON values of what term-fl stores, writes and serves.

summary.json, the results store's JSON columns and the dashboard's API all
hold standard JSON (``allow_nan=False``): a non-finite number (a NaN
statistic, a risk whose minimising t is infinite) becomes ``null``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from typing import Any

import numpy as np


def plain(obj: Any) -> Any:
    """``obj`` as plain JSON values.

    numpy scalars and arrays become Python numbers and lists, tuples become
    lists, dataclass instances dicts, paths strings, mapping keys strings,
    and NaN / ±inf ``None``. Anything else raises ``TypeError`` naming its type.
    """
    kind = type(obj)  # the exact built-in types first: a comparison carries long lists of floats
    if kind is float:
        return obj if obj - obj == 0.0 else None  # NaN - NaN and inf - inf are NaN
    if kind is list:
        return [plain(v) for v in obj]
    if kind is int or kind is str or kind is bool or obj is None:
        return obj
    if kind is dict:
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, bool) or isinstance(obj, str):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, int):
        return obj
    if isinstance(obj, Mapping):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, (np.generic, np.ndarray)):
        return plain(obj.tolist())
    if is_dataclass(obj) and not isinstance(obj, type):
        return plain(asdict(obj))
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    raise TypeError(f"not JSON-serialisable: a {type(obj).__name__} ({obj!r})")
