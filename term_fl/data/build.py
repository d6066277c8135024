"""build_dataset: a named dataset, split per device and optionally corrupted, as a FederatedDataset."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from term_fl.common.seeding import NOISE_TAG, SPLIT_TAG, check_seed, device_rng
from term_fl.common.settings import SettingsModel

from .noise import check_noise, corrupt_device, noise_metadata, select_noisy_devices
from .registry import DEFAULT_SIZE_LIMIT_GB, DatasetSpec, check_data_size, dataset_spec
from .splits import check_fractions, split_indices, split_sizes
from .types import DeviceData, FederatedDataset

def build_dataset(
    name: str,
    *,
    seed: int = 0,
    train_fraction: float = 0.8,
    val_fraction: float = 0.1,
    test_fraction: float = 0.1,
    noise: str = "none",
    noisy_devices: Iterable[int] = (),
    num_noisy: int = 0,
    noise_scale: float = 10.0,
    min_test_samples: int = 0,
    size_limit_gb: float = DEFAULT_SIZE_LIMIT_GB,
    **settings: Any,
) -> FederatedDataset:
    """Build a federated dataset whose devices are generated or split lazily, on first access.

    Settings are validated here, at once; a device's arrays are made when
    ``dataset.device(k)`` is first called, from ``(seed, k)`` alone.

    Parameters
    ----------
    name : str
        A registered dataset (:data:`term_fl.data.registry.DATASETS`):
        "synthetic" is Synthetic(alpha, beta) (60 features, 10 classes), the
        default that needs no file; "vehicle" is the SensIT sensor data read
        from ``path`` (23 devices, 100 features, 2 classes).
    seed : int, default 0
        Seeds the synthetic generator, the per-device splits and the noise.
        Different seeds re-split the vehicle devices.
    train_fraction, val_fraction, test_fraction : float, default 0.8 / 0.1 / 0.1
        Split of every device; each > 0, summing to 1. Rounding: see
        :mod:`term_fl.data.splits` (every split keeps at least one sample).
        For the vehicle data prefer larger held-out fractions (e.g. 0.5 / 0.2
        / 0.3, docs/data.md 'Splits').
    noise : {"none", "random_labels", "flip_labels", "scale_features"}, default "none"
        Corruption of the chosen devices' train and val splits (test stays
        clean); see :mod:`term_fl.data.noise`.
    noisy_devices : iterable of int, default ()
        Indices of the devices to corrupt.
    num_noisy : int, default 0
        Alternatively, how many devices to corrupt, chosen reproducibly from
        the seed. Give at most one of ``noisy_devices`` and ``num_noisy``.
    min_test_samples : int, default 0
        At least this many test samples per device (min(it, n - 2)), taken
        from train, then validation (:func:`term_fl.data.splits.split_sizes`).
    noise_scale : float, default 10.0
        Feature factor of "scale_features".
    size_limit_gb : float, default 4.0
        Refuse (ValueError) data estimated to take more memory, before
        anything is generated (:func:`term_fl.data.registry.check_data_size`).
    **settings
        The dataset's own settings, the fields of its settings model
        (:class:`~term_fl.data.synthetic.SyntheticSettings`: ``num_devices``,
        ``alpha``, ``beta``, ``max_samples``;
        :class:`~term_fl.data.vehicle.VehicleSettings`: ``path``, ``sha256``),
        with the model's defaults; another dataset's setting is an error.
        This function does not read ``TERM_FL_VEHICLE_DATA``: the caller (the
        scenario config) resolves it.

    Returns
    -------
    FederatedDataset
        With ``metadata`` holding the name, seed, split fractions, per-device
        split sizes, the noise ``{kind, devices, scale}`` and what the
        dataset's builder says of its source: the generator parameters
        (synthetic) or the file's path, sha256 and user ids (vehicle).
    """
    # the checks of every setting, before anything is generated or read
    spec = dataset_spec(name)
    seed = check_seed(seed)
    values = dataset_settings(spec, settings)
    check_data_size(spec, values, size_limit_gb)
    fractions = check_fractions(train_fraction, val_fraction, test_fraction)
    check_noise(noise, noise_scale)

    # the dataset's own devices, then the same splits and noise for every dataset
    source = spec.source(values, seed)
    sizes, device_names, num_classes = source.sizes, source.device_names, source.num_classes
    min_test = check_min_test(min_test_samples)
    counts = [split_sizes(n, fractions, device=device_names[k], min_test=min_test) for k, n in enumerate(sizes)]
    noisy = select_noisy_devices(
        noise, len(sizes), seed=seed, noisy_devices=noisy_devices, num_noisy=num_noisy
    )
    noisy_set = frozenset(noisy)

    def build_device(k: int) -> DeviceData:
        x, y = source.raw_device(k)
        train, val, test = split_indices(len(y), fractions, device_rng(seed, k, SPLIT_TAG), device=device_names[k],
                                         min_test=min_test)
        data = DeviceData(x[train], y[train], x[val], y[val], x[test], y[test])
        if k in noisy_set:
            data = corrupt_device(
                data, noise, num_classes=num_classes, scale=noise_scale, rng=device_rng(seed, k, NOISE_TAG)
            )
        return data

    metadata = {
        "name": name,
        "seed": seed,
        "num_devices": len(sizes),
        "num_features": source.num_features,
        "num_classes": num_classes,
        **source.metadata,
        "fractions": {"train": fractions[0], "val": fractions[1], "test": fractions[2]},
        "sizes": {split: [c[i] for c in counts] for i, split in enumerate(("train", "val", "test"))},
        "noise": noise_metadata(noise, noisy, noise_scale),
    }
    return FederatedDataset(name, len(sizes), source.num_features, num_classes, metadata, build_device)


def check_min_test(value: Any) -> int:
    """``min_test_samples`` as an int; a ValueError unless it is an integer >= 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"min_test_samples must be an integer >= 0, got {value!r}")
    return value


def dataset_settings(spec: DatasetSpec, settings: dict[str, Any]) -> SettingsModel:
    """``settings`` validated by the dataset's settings model; a ValueError naming the dataset, key and value."""
    return spec.settings.of(f"dataset {spec.name}", settings)


def dataset_for(scenario: Any) -> FederatedDataset:
    """The dataset a scenario's ``[data]`` table describes (seeded by ``data.seed``, else ``run.seed``).

    ``scenario`` is a :class:`term_fl.config.Scenario` (read, not imported).
    The table's shared settings (split fractions, noise) and the chosen
    dataset's own sub-table are keyword arguments of :func:`build_dataset` of
    the same names. Devices are built lazily, on first access.
    """
    data = scenario.data
    settings = {**data.shared_settings(), **data.settings.model_dump()}
    settings.pop("seed")  # data.seed, else run.seed: scenario.data_seed
    return build_dataset(data.name, seed=scenario.data_seed, **settings)
