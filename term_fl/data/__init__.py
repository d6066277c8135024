"""Federated datasets as lazily built per-device train / val / test splits (numpy and pydantic only).

``build_dataset(name, ...)`` (or ``dataset_for(scenario)``) returns a
:class:`FederatedDataset`; ``dataset.device(k)`` builds device k's
:class:`DeviceData` from ``(seed, k)`` alone on first access. Features are
float32 ``(n, d)``, labels int64 class indices ``0..C-1``.

Modules: ``registry`` (``DATASETS``: one entry per dataset, its settings and
builder), ``synthetic`` (Synthetic(alpha, beta)), ``vehicle`` (SensIT JSON
loader), ``types`` (containers), ``splits`` (seeded splits and their
rounding rule), ``noise`` (corrupting chosen devices), ``build``
(``build_dataset``: the same splits and noise for every dataset). Every
generator comes from :mod:`term_fl.common.seeding`.
"""

from .build import build_dataset, dataset_for
from .errors import DataError, DataSettingError
from .noise import NOISE_KINDS
from .registry import DATASETS, DatasetSpec
from .splits import split_indices, split_sizes
from .synthetic import SyntheticGenerator, SyntheticSettings
from .types import DATA_SPLITS, DeviceData, DeviceSource, FederatedDataset
from .vehicle import ANY_SHA256, VEHICLE_ENV_VAR, VEHICLE_SHA256, VehicleData, VehicleSettings, load_vehicle

__all__ = [
    "ANY_SHA256",
    "DATASETS",
    "NOISE_KINDS",
    "DATA_SPLITS",
    "VEHICLE_ENV_VAR",
    "VEHICLE_SHA256",
    "DataError",
    "DataSettingError",
    "DatasetSpec",
    "DeviceData",
    "DeviceSource",
    "FederatedDataset",
    "SyntheticGenerator",
    "SyntheticSettings",
    "VehicleData",
    "VehicleSettings",
    "build_dataset",
    "dataset_for",
    "load_vehicle",
    "split_indices",
    "split_sizes",
]
