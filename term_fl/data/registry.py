"""The dataset registry: one entry per dataset, the only list of them.

An entry names the dataset (``data.name`` of a scenario), how people call it,
its settings model (the scenario's ``[data.<name>]`` table: defaults, ranges,
descriptions) and its builder, which turns the settings and a seed into the
devices' samples (:class:`~term_fl.data.types.DeviceSource`);
:func:`term_fl.data.build_dataset` splits and corrupts those devices the same
way for every dataset. The scenario schema, the run header and
:func:`~term_fl.data.build_dataset` read this list: adding a dataset is one
module (its settings and builder) and one entry here.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from term_fl.common.settings import SettingsModel

from .synthetic import SyntheticSettings, estimated_bytes, synthetic_source
from .types import DeviceSource
from .vehicle import VehicleSettings, check_vehicle_file, vehicle_source

__all__ = ["DATASETS", "DEFAULT_SIZE_LIMIT_GB", "DatasetSpec", "check_data_size", "dataset_spec"]


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset as the rest of term-fl sees it.

    Attributes
    ----------
    name : str
        Its value of ``data.name``.
    label : str
        How the run header calls it: a format string over its settings
        (``"Synthetic({alpha:g}, {beta:g})"``).
    settings : type
        Its settings model: the fields of the scenario's ``[data.<name>]`` table.
    source : callable
        ``source(settings, seed) -> DeviceSource``: its devices' samples
        (generated or read lazily), before splitting and noise.
    check : callable or None
        ``check(settings)`` before a scenario starts: raises
        :class:`~term_fl.data.errors.DataSettingError` naming the setting
        when a file it needs is missing or is another file.
    known_devices : callable or None
        ``known_devices(settings) -> int``: the number of devices when the
        settings alone give it (a file's count is known once it is read).
    estimated_bytes : callable or None
        ``estimated_bytes(settings) -> float``: about how much memory the
        samples take, from the settings alone, for data that the settings
        can make arbitrarily large (the scenario refuses more than
        ``data.size_limit_gb`` before anything is generated).
    """

    name: str
    label: str
    settings: type[SettingsModel]
    source: Callable[[Any, int], DeviceSource]
    check: Callable[[Any], None] | None = None
    known_devices: Callable[[Any], int] | None = None
    estimated_bytes: Callable[[Any], float] | None = None

    def describe(self, settings: SettingsModel) -> str:
        """The label with the settings filled in: ``Synthetic(1, 1)``."""
        return self.label.format(**settings.model_dump())


DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        DatasetSpec("synthetic", "Synthetic({alpha:g}, {beta:g})", SyntheticSettings, synthetic_source,
                    known_devices=operator.attrgetter("num_devices"), estimated_bytes=estimated_bytes),
        DatasetSpec("vehicle", "vehicle sensors (SensIT)", VehicleSettings, vehicle_source, check=check_vehicle_file),
    )
}


DEFAULT_SIZE_LIMIT_GB = 4.0
"""The default of ``data.size_limit_gb``: data estimated to take more memory is refused before it is made."""


def check_data_size(spec: DatasetSpec, settings: SettingsModel, limit_gb: float) -> None:
    """A ValueError naming the settings and the estimate when the data would take more than ``limit_gb`` GB.

    Estimated from the settings alone (:attr:`DatasetSpec.estimated_bytes`),
    before anything is generated: it answers at once, however large the
    settings ask the data to be.
    """
    if spec.estimated_bytes is None:
        return
    size = spec.estimated_bytes(settings)
    if size <= limit_gb * 1e9:
        return
    given = ", ".join(f"data.{spec.name}.{key} = {value}" for key, value in settings.model_dump().items()
                      if key in ("num_devices", "samples_per_device", "max_samples") and value is not None)
    raise ValueError(
        f"{given or 'data.' + spec.name}: the data would take about {size / 1e9:,.1f} GB of memory (estimated "
        f"before anything is generated); the limit is data.size_limit_gb = {limit_gb:g}: use fewer devices or "
        "smaller ones, or raise data.size_limit_gb if this machine has the memory"
    )


def dataset_spec(name: str) -> DatasetSpec:
    """The registered dataset ``name``; a ValueError listing the registered names otherwise."""
    try:
        return DATASETS[name]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; expected one of {', '.join(DATASETS)}") from None
