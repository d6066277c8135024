"""Federated datasets as lazily built per-device train / val / test splits (numpy only).

``build_dataset("synthetic" | "vehicle", ...)`` (or ``dataset_for(scenario)``) returns a
:class:`FederatedDataset`; ``dataset.device(k)`` builds device k's
:class:`DeviceData` from ``(seed, k)`` alone on first access. Features are
float32 ``(n, d)``, labels int64 class indices ``0..C-1``.

Modules: ``types`` (containers), ``synthetic`` (Synthetic(alpha, beta)),
``vehicle`` (SensIT JSON loader), ``splits`` (seeded splits and their
rounding rule), ``noise`` (corrupting chosen devices), ``build``
(``build_dataset``). Every generator comes from :mod:`term_fl.common.seeding`.
"""

from .build import DATASET_NAMES, build_dataset, dataset_for
from .errors import DataError
from .noise import NOISE_KINDS
from .splits import split_indices, split_sizes
from .synthetic import SyntheticGenerator
from .types import DATA_SPLITS, DeviceData, FederatedDataset
from .vehicle import ANY_SHA256, VEHICLE_ENV_VAR, VEHICLE_SHA256, VehicleData, load_vehicle

__all__ = [
    "ANY_SHA256",
    "DATASET_NAMES",
    "NOISE_KINDS",
    "DATA_SPLITS",
    "VEHICLE_ENV_VAR",
    "VEHICLE_SHA256",
    "DataError",
    "DeviceData",
    "FederatedDataset",
    "SyntheticGenerator",
    "VehicleData",
    "build_dataset",
    "dataset_for",
    "load_vehicle",
    "split_indices",
    "split_sizes",
]
