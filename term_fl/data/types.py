"""Containers: one device's train / val / test arrays, a dataset's devices before splitting, and a federation
of devices built lazily."""

from __future__ import annotations

import numbers
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from term_fl.common.keys import DATA_SPLITS

Split = Literal["train", "val", "test"]


@dataclass(frozen=True, eq=False)
class DeviceData:
    """One device's data, split into train, validation and test.

    Features are ``float32`` arrays of shape ``(n, d)``; labels are ``int64``
    class indices ``0..C-1`` of shape ``(n,)``. Every split holds at least one
    sample when built by :func:`term_fl.data.build_dataset`.

    The arrays may be shared with a dataset's cache: treat them as read-only
    (copy before modifying in place). Instances compare by identity.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray

    def __post_init__(self) -> None:
        for name in DATA_SPLITS:
            x, y = self.split(name)
            if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim != 2:
                raise TypeError(f"x_{name} must be a float32 array of shape (n, d), got {_describe(x)}")
            if not isinstance(y, np.ndarray) or y.dtype != np.int64 or y.ndim != 1:
                raise TypeError(f"y_{name} must be an int64 array of shape (n,), got {_describe(y)}")
            if len(x) != len(y):
                raise ValueError(f"x_{name} has {len(x)} samples but y_{name} has {len(y)}")
        num_features = self.x_train.shape[1]
        for name in ("val", "test"):
            x, _ = self.split(name)
            if x.shape[1] != num_features:
                raise ValueError(f"x_{name} has {x.shape[1]} features but x_train has {num_features}")

    def split(self, name: Split) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(x, y)`` of split ``name`` ("train", "val" or "test")."""
        if name not in DATA_SPLITS:
            raise ValueError(f"unknown split {name!r}; expected one of {', '.join(DATA_SPLITS)}")
        return getattr(self, f"x_{name}"), getattr(self, f"y_{name}")

    def num_examples(self, name: Split) -> int:
        """Number of samples in split ``name``."""
        return len(self.split(name)[1])


class FederatedDataset:
    """A federation of devices whose data is built on first access and cached.

    Parameters
    ----------
    name : str
        Dataset name ("synthetic", "vehicle").
    num_devices : int
        Number of devices; valid indices are ``0..num_devices-1``.
    num_features : int
        Features per sample (columns of every ``x``).
    num_classes : int
        Labels are class indices ``0..num_classes-1``.
    metadata : dict
        JSON-serialisable description of how the data was made (sizes per
        device and split, file path and sha256, generator parameters, noise).
    build_device : callable
        ``build_device(k) -> DeviceData``; called at most once per device.
    """

    def __init__(
        self,
        name: str,
        num_devices: int,
        num_features: int,
        num_classes: int,
        metadata: dict[str, Any],
        build_device: Callable[[int], DeviceData],
    ) -> None:
        self.name = name
        self.num_devices = num_devices
        self.num_features = num_features
        self.num_classes = num_classes
        self.metadata = metadata
        self._build_device = build_device
        self._cache: dict[int, DeviceData] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.num_devices

    def __repr__(self) -> str:
        return (
            f"FederatedDataset(name={self.name!r}, num_devices={self.num_devices}, "
            f"num_features={self.num_features}, num_classes={self.num_classes})"
        )

    def device(self, k: int) -> DeviceData:
        """Return device ``k`` (built on first access, then cached).

        Raises ``IndexError`` when ``k`` is outside ``0..num_devices-1``.
        """
        k = self.check_device_index(k)
        with self._lock:
            if k not in self._cache:
                self._cache[k] = self._build_device(k)
            return self._cache[k]

    def check_device_index(self, k: object) -> int:
        """Return ``k`` as an int; raise unless it is a valid device index."""
        if isinstance(k, bool) or not isinstance(k, numbers.Integral):
            raise TypeError(f"device index must be an integer, got {k!r}")
        if not 0 <= k < self.num_devices:
            raise IndexError(
                f"device index {k} is out of range 0..{self.num_devices - 1} "
                f"(dataset {self.name!r} has {self.num_devices} devices)"
            )
        return int(k)


@dataclass(frozen=True, eq=False)
class DeviceSource:
    """What a dataset's builder gives: its devices' samples before splitting, and what describes them.

    Attributes
    ----------
    raw_device : callable
        ``raw_device(k) -> (x float32 (n, d), y int64 (n,))``: device k's samples; called lazily.
    sizes : list of int
        Samples per device.
    device_names : list of str
        How a message names each device (a file and a user id, or an index).
    num_features, num_classes : int
        Columns of every ``x``; labels are ``0..num_classes-1``.
    metadata : dict
        JSON values that say where the samples came from (generator parameters, file path and sha256).
    """

    raw_device: Callable[[int], tuple[np.ndarray, np.ndarray]]
    sizes: list[int]
    device_names: list[str]
    num_features: int
    num_classes: int
    metadata: dict[str, Any]


def _describe(a: object) -> str:
    if isinstance(a, np.ndarray):
        return f"{a.dtype} array of shape {a.shape}"
    return type(a).__name__
