"""Noise injection: corrupt chosen devices' train and validation splits, reproducibly.

Test splits stay clean, so test accuracy measures what the model learned
(docs/data.md, 'Noise injection'). Kinds:

- ``"none"``: no corruption.
- ``"random_labels"``: every train / val label is replaced by a class drawn
  uniformly from ``0..C-1`` (so about 1/C of them keep their value).
- ``"flip_labels"``: every train / val label y becomes ``(y + 1) mod C``:
  ``1 - y`` for binary labels; for C > 2 a systematic shift to the next
  class, so every label is wrong and the corruption is deterministic.
- ``"scale_features"``: train / val features are multiplied by ``scale``
  (a miscalibrated sensor); labels are kept.

Device k's corruption draws from its own generator ``[seed, k, NOISE_TAG]``;
when only the number of noisy devices is given, they are chosen with
``[seed, NOISE_SELECT_TAG]``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import numpy as np

from term_fl.common.seeding import NOISE_SELECT_TAG, dataset_rng

from .errors import DataError
from .types import DeviceData

NOISE_KINDS = ("none", "random_labels", "flip_labels", "scale_features")


def check_noise(kind: str, scale: float) -> None:
    """Raise ``ValueError`` for an unknown kind or a non-finite scale."""
    if kind not in NOISE_KINDS:
        raise ValueError(f"unknown noise kind {kind!r}; expected one of {', '.join(NOISE_KINDS)}")
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not math.isfinite(scale):
        raise ValueError(f"noise_scale must be a finite number, got {scale!r}")


def select_noisy_devices(
    kind: str,
    num_devices: int,
    *,
    seed: int,
    noisy_devices: Iterable[int] = (),
    num_noisy: int = 0,
) -> tuple[int, ...]:
    """Return the sorted indices of the devices to corrupt.

    Either ``noisy_devices`` lists them, or ``num_noisy`` of them are chosen
    uniformly without replacement from ``[seed, NOISE_SELECT_TAG]``. Indices
    are validated (``0..num_devices-1``) even when ``kind`` is "none", which
    corrupts nothing and returns ``()``. A kind with no devices selected also
    corrupts nothing (a sweep over ``num_noisy`` may start at 0).
    """
    devices = tuple(noisy_devices)
    if isinstance(num_noisy, bool) or not isinstance(num_noisy, numbers.Integral):
        raise DataError(f"num_noisy must be an integer, got {num_noisy!r}")
    if devices and num_noisy:
        raise DataError("give either noisy_devices or num_noisy, not both")
    bad = [d for d in devices if isinstance(d, bool) or not isinstance(d, numbers.Integral) or not 0 <= d < num_devices]
    if bad:
        raise DataError(
            f"data.noisy_devices {bad!r} are not device indices in the range 0..{num_devices - 1} "
            f"({num_devices} devices)"
        )
    if not 0 <= num_noisy <= num_devices:
        raise DataError(f"data.num_noisy must be in 0..{num_devices} (the number of devices), got {num_noisy}")
    if num_noisy:
        chosen = dataset_rng(seed, NOISE_SELECT_TAG).choice(num_devices, size=int(num_noisy), replace=False)
        devices = tuple(int(d) for d in chosen)
    if kind == "none":
        return ()
    return tuple(sorted({int(d) for d in devices}))


def corrupt_device(
    data: DeviceData,
    kind: str,
    *,
    num_classes: int,
    scale: float,
    rng: np.random.Generator,
) -> DeviceData:
    """Return a copy of ``data`` with its train and val splits corrupted by ``kind``; test is kept as is."""
    if kind == "none":
        return data
    if kind == "random_labels":
        return replace(
            data,
            y_train=rng.integers(0, num_classes, size=len(data.y_train), dtype=np.int64),
            y_val=rng.integers(0, num_classes, size=len(data.y_val), dtype=np.int64),
        )
    if kind == "flip_labels":
        return replace(
            data,
            y_train=(data.y_train + 1) % num_classes,
            y_val=(data.y_val + 1) % num_classes,
        )
    if kind == "scale_features":
        factor = np.float32(scale)
        return replace(data, x_train=data.x_train * factor, x_val=data.x_val * factor)
    raise ValueError(f"unknown noise kind {kind!r}; expected one of {', '.join(NOISE_KINDS)}")


def noise_metadata(kind: str, devices: tuple[int, ...], scale: float) -> dict[str, Any]:
    """``{kind, devices, scale}`` for a dataset's metadata; scale is None unless features are scaled."""
    return {
        "kind": kind,
        "devices": list(devices),
        "scale": float(scale) if kind == "scale_features" else None,
    }
