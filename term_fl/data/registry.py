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

from .synthetic import SyntheticSettings, synthetic_source
from .types import DeviceSource
from .vehicle import VehicleSettings, check_vehicle_file, vehicle_source

__all__ = ["DATASETS", "DatasetSpec", "dataset_spec"]


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
    """

    name: str
    label: str
    settings: type[SettingsModel]
    source: Callable[[Any, int], DeviceSource]
    check: Callable[[Any], None] | None = None
    known_devices: Callable[[Any], int] | None = None

    def describe(self, settings: SettingsModel) -> str:
        """The label with the settings filled in: ``Synthetic(1, 1)``."""
        return self.label.format(**settings.model_dump())


DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        DatasetSpec("synthetic", "Synthetic({alpha:g}, {beta:g})", SyntheticSettings, synthetic_source,
                    known_devices=operator.attrgetter("num_devices")),
        DatasetSpec("vehicle", "vehicle sensors (SensIT)", VehicleSettings, vehicle_source, check=check_vehicle_file),
    )
}


def dataset_spec(name: str) -> DatasetSpec:
    """The registered dataset ``name``; a ValueError listing the registered names otherwise."""
    try:
        return DATASETS[name]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; expected one of {', '.join(DATASETS)}") from None
