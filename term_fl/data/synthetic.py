"""Synthetic(alpha, beta): the heterogeneous federated data of FedProx and q-FFL.

Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith, "Federated Optimization in
Heterogeneous Networks" (MLSys 2020), section 5.1; also used by q-FFL (Li et
al., ICLR 2020). Per device k (alpha and beta are *variances*):

    u_k ~ N(0, alpha),  B_k ~ N(0, beta)
    W_k ~ N(u_k, 1)  (10 x 60),  b_k ~ N(u_k, 1)  (10),  v_k ~ N(B_k, 1)  (60)
    x ~ N(v_k, Sigma),  Sigma diagonal,  Sigma_jj = j^-1.2  (j = 1..60)
    y = argmax softmax(W_k x + b_k)  (= the argmax of the logits)

beta controls how much the devices' feature distributions differ. alpha,
as FedProx defines it, does not change the labels: u_k is added to every
entry of W_k and b_k, which adds the same number u_k (1 + sum_j x_j) to
every class's logit, and the argmax ignores it (so two datasets that differ
only in alpha have the same labels). What makes the devices' labelling
functions differ is each device's own N(0, 1) part of W_k and b_k.

**Two concepts** (optional, ``minority >= 1``): instead of one random
labelling function per device, the devices share two, a majority concept
(W_A, b_A) and a minority concept (W_B, b_B), each N(0, 1), drawn once from
``[seed, CONCEPT_TAG]``; ``minority`` devices, chosen from
``[seed, MINORITY_TAG]``, follow concept B, the others concept A, and a
device's own matrix is its concept's plus ``concept_noise`` times its own
N(0, 1) part (the same draws as above). Features are as above. A linear
model that averages devices serves the majority concept: the minority
devices are hard for it, which is the heterogeneity in difficulty (not in
size) that tilting addresses.

**Equal sizes** (optional, ``samples_per_device``): every device holds that
many samples instead of the lognormal sizes below.

Device sizes follow FedProx: ``floor(lognormal(4, 2)) + 50``, capped at
``max_samples``. The reference code caps nothing, but the lognormal tail
reaches millions of samples for a few devices among thousands; the cap
(default 1000, :class:`SyntheticSettings`) keeps memory bounded.
A cap below 50 lowers the floor to the cap.

Scale: all sizes come from one cheap stream ``[seed, SIZES_TAG]``; device k's
parameters and samples come from ``[seed, k, DEVICE_TAG]`` alone, so a
client builds its own device without generating any other.

:class:`SyntheticSettings` are the dataset's settings (a scenario's
``[data.synthetic]`` table) and :func:`synthetic_source` its builder: the
dataset registry (:mod:`term_fl.data.registry`) names both.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated, Any

import numpy as np
from pydantic import Field

from term_fl.common.seeding import (
    CONCEPT_TAG,
    DEVICE_TAG,
    MINORITY_TAG,
    SIZES_TAG,
    check_seed,
    dataset_rng,
    device_rng,
)
from term_fl.common.settings import HASHED_WHEN_SET, SettingsModel

from .splits import MIN_DEVICE_SAMPLES
from .types import DeviceSource

NUM_FEATURES = 60
NUM_CLASSES = 10
SIZE_OFFSET = 50
"""FedProx adds 50 to every lognormal device size."""

_FEATURE_STD = np.arange(1, NUM_FEATURES + 1, dtype=np.float64) ** -0.6
"""sqrt(Sigma_jj) = sqrt(j^-1.2)."""
SIZE_MU, SIZE_SIGMA = 4.0, 2.0
"""The lognormal of the device sizes (mean and standard deviation of its logarithm)."""
BYTES_PER_SAMPLE = NUM_FEATURES * 4 + 8
"""A sample in memory: 60 float32 features and an int64 label."""


@dataclass(frozen=True)
class SyntheticGenerator:
    """Generator of Synthetic(alpha, beta) devices.

    Parameters
    ----------
    seed : int
        Non-negative seed of every draw.
    num_devices : int
        Number of devices (>= 1).
    alpha : float
        Variance of u_k, the mean of a device's model (>= 0).
    beta : float
        Variance of B_k, the mean of a device's feature means (>= 0).
    max_samples : int or None
        Cap on a device's size (>= 3); None caps nothing.
    minority : int (default: 0)
        0: one random labelling function per device (FedProx's generator).
        1 .. num_devices - 1: two shared concepts, this many devices following
        the minority one.
    concept_noise : float (default: 0.0)
        With two concepts, the scale of each device's own N(0, 1) part added
        to its concept's matrix (>= 0; 0: the devices of a concept label alike).
    samples_per_device : int or None (default: None)
        Every device's size (>= 3, not capped); None: the lognormal sizes.
    """

    seed: int
    num_devices: int
    alpha: float
    beta: float
    max_samples: int | None
    minority: int = 0
    concept_noise: float = 0.0
    samples_per_device: int | None = None

    def __post_init__(self) -> None:
        check_seed(self.seed)
        if isinstance(self.num_devices, bool) or not isinstance(self.num_devices, numbers.Integral) or self.num_devices < 1:
            raise ValueError(f"num_devices must be an integer >= 1, got {self.num_devices!r}")
        for name in ("alpha", "beta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} (a variance) must be a finite number >= 0, got {value!r}")
        cap = self.max_samples
        if cap is not None and (
            isinstance(cap, bool) or not isinstance(cap, numbers.Integral) or cap < MIN_DEVICE_SAMPLES
        ):
            raise ValueError(f"max_samples must be None or an integer >= {MIN_DEVICE_SAMPLES}, got {cap!r}")
        self._check_two_concepts()

    def _check_two_concepts(self) -> None:
        minority, noise, size = self.minority, self.concept_noise, self.samples_per_device
        if isinstance(minority, bool) or not isinstance(minority, numbers.Integral) or not (
            minority == 0 or 1 <= minority < self.num_devices
        ):
            raise ValueError(
                f"minority must be 0 (one concept per device) or 1..{self.num_devices - 1} "
                f"(devices following the minority concept), got {minority!r}"
            )
        if isinstance(noise, bool) or not isinstance(noise, numbers.Real) or not (math.isfinite(noise) and noise >= 0):
            raise ValueError(f"concept_noise must be a finite number >= 0, got {noise!r}")
        if size is not None and (
            isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < MIN_DEVICE_SAMPLES
        ):
            raise ValueError(f"samples_per_device must be None or an integer >= {MIN_DEVICE_SAMPLES}, got {size!r}")

    @cached_property
    def sizes(self) -> np.ndarray:
        """Samples per device: ``samples_per_device``, or ``floor(lognormal(4, 2)) + 50`` capped at ``max_samples``
        (int64, read-only)."""
        if self.samples_per_device is not None:
            sizes = np.full(self.num_devices, self.samples_per_device, dtype=np.int64)
        else:
            draws = dataset_rng(self.seed, SIZES_TAG).lognormal(SIZE_MU, SIZE_SIGMA, size=self.num_devices)
            sizes = draws.astype(np.int64) + SIZE_OFFSET
            if self.max_samples is not None:
                sizes = np.minimum(sizes, self.max_samples)
        sizes.setflags(write=False)
        return sizes

    @cached_property
    def minority_devices(self) -> np.ndarray:
        """The devices that follow the minority concept (sorted; empty with one concept per device)."""
        if not self.minority:
            return np.zeros(0, dtype=np.int64)
        chosen = dataset_rng(self.seed, MINORITY_TAG).choice(self.num_devices, size=self.minority, replace=False)
        return np.sort(chosen).astype(np.int64)

    @cached_property
    def _concepts(self) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """(W_A, b_A), (W_B, b_B): the majority and minority concepts, N(0, 1)."""
        rng = dataset_rng(self.seed, CONCEPT_TAG)
        return tuple(  # type: ignore[return-value]
            (rng.standard_normal((NUM_CLASSES, NUM_FEATURES)), rng.standard_normal(NUM_CLASSES)) for _ in range(2)
        )

    def device(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Return device k's samples ``(x float32 (n, 60), y int64 (n,))``, n = ``sizes[k]``."""
        if not 0 <= k < self.num_devices:
            raise IndexError(f"device index {k} is out of range 0..{self.num_devices - 1}")
        # Draw the device's parameters in the generator's fixed order (one stream per device).
        rng = device_rng(self.seed, k, DEVICE_TAG)
        u = rng.normal(0.0, math.sqrt(self.alpha))
        b_mean = rng.normal(0.0, math.sqrt(self.beta))
        weights = rng.normal(u, 1.0, size=(NUM_CLASSES, NUM_FEATURES))
        bias = rng.normal(u, 1.0, size=NUM_CLASSES)
        v = rng.normal(b_mean, 1.0, size=NUM_FEATURES)
        if self.minority:
            # Two concepts: the device's concept plus concept_noise times its own N(0, 1) part.
            concept_w, concept_b = self._concepts[int(k in self.minority_devices)]
            weights = concept_w + self.concept_noise * (weights - u)
            bias = concept_b + self.concept_noise * (bias - u)
        # Sample the features around the device's mean and label them with its labelling function.
        n = int(self.sizes[k])
        x = v + rng.standard_normal((n, NUM_FEATURES)) * _FEATURE_STD
        y = np.argmax(x @ weights.T + bias, axis=1).astype(np.int64)
        return x.astype(np.float32), y

    def metadata(self) -> dict[str, Any]:
        """Generator parameters for a dataset's metadata (the two-concept and equal-size keys only when used)."""
        meta: dict[str, Any] = {
            "alpha": float(self.alpha),
            "beta": float(self.beta),
            "max_samples": None if self.max_samples is None else int(self.max_samples),
            "sizes": "floor(lognormal(4, 2)) + 50, capped at max_samples",
        }
        if self.samples_per_device is not None:
            meta["sizes"] = f"{int(self.samples_per_device)} samples per device"
        if self.minority:
            meta["concepts"] = {
                "minority_devices": [int(k) for k in self.minority_devices],
                "concept_noise": float(self.concept_noise),
            }
        return meta


class SyntheticSettings(SettingsModel):
    """The settings of Synthetic(alpha, beta) (a scenario's ``[data.synthetic]`` table)."""

    num_devices: int = Field(100, ge=1, le=1_000_000, description="synthetic devices")
    alpha: float = Field(1.0, ge=0.0, le=100.0, description="variance of the devices' model means")
    beta: float = Field(1.0, ge=0.0, le=100.0, description="variance of the devices' feature means")
    max_samples: int | None = Field(1000, ge=MIN_DEVICE_SAMPLES, le=1_000_000,
                                    description="cap on a synthetic device's size")
    minority: Annotated[int, HASHED_WHEN_SET] = Field(0, ge=0, le=1_000_000,
                          description="0: one labelling function per device; n >= 1: two shared concepts, n devices "
                                      "following the minority one")
    concept_noise: Annotated[float, HASHED_WHEN_SET] = Field(0.0, ge=0.0, le=100.0,
                                 description="with two concepts, the scale of each device's own part of its "
                                             "labelling function")
    samples_per_device: Annotated[int | None, HASHED_WHEN_SET] = Field(None, ge=MIN_DEVICE_SAMPLES, le=1_000_000,
                                           description="every device's size (None: floor(lognormal(4, 2)) + 50, "
                                                       "capped at max_samples)")


def expected_device_size(max_samples: int | None) -> float:
    """The mean size of a device, ``floor(L) + 50`` capped at ``max_samples`` with L ~ lognormal(4, 2).

    From the lognormal's closed form, E[min(L, k)] = exp(mu + sigma^2 / 2)
    Phi((ln k - mu - sigma^2) / sigma) + k (1 - Phi((ln k - mu) / sigma)) with
    k = max_samples - 50 (the floor is left out: within one sample of the
    mean); without a cap, exp(mu + sigma^2 / 2) + 50.
    """
    mean = math.exp(SIZE_MU + SIZE_SIGMA**2 / 2)
    if max_samples is None:
        return mean + SIZE_OFFSET
    k = max_samples - SIZE_OFFSET
    if k <= 0:
        return float(max_samples)
    phi = lambda z: 0.5 * math.erfc(-z / math.sqrt(2))  # noqa: E731  the standard normal's CDF
    z = (math.log(k) - SIZE_MU) / SIZE_SIGMA
    return SIZE_OFFSET + mean * phi(z - SIZE_SIGMA) + k * (1 - phi(z))


def estimated_bytes(settings: SyntheticSettings) -> float:
    """About how many bytes the dataset's samples take in memory, from its settings alone (nothing generated)."""
    per_device = (settings.samples_per_device if settings.samples_per_device is not None
                  else expected_device_size(settings.max_samples))
    return settings.num_devices * per_device * BYTES_PER_SAMPLE


def synthetic_source(settings: SyntheticSettings, seed: int) -> DeviceSource:
    """The devices of Synthetic(alpha, beta) generated from ``seed`` (each on first access)."""
    generator = SyntheticGenerator(seed, settings.num_devices, settings.alpha, settings.beta, settings.max_samples,
                                   settings.minority, settings.concept_noise, settings.samples_per_device)
    sizes = [int(n) for n in generator.sizes]
    return DeviceSource(generator.device, sizes, [f"synthetic device {k}" for k in range(len(sizes))],
                        NUM_FEATURES, NUM_CLASSES, {"generator": generator.metadata()})
