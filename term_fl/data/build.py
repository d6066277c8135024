"""build_dataset: a named dataset, split per device and optionally corrupted, as a FederatedDataset."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from .errors import DataError
from .noise import check_noise, corrupt_device, noise_metadata, select_noisy_devices
from term_fl.common.seeding import NOISE_TAG, SPLIT_TAG, check_seed, device_rng
from .splits import check_fractions, split_indices, split_sizes
from .synthetic import NUM_CLASSES, NUM_FEATURES, SyntheticGenerator
from .types import DeviceData, FederatedDataset
from .vehicle import VEHICLE_ENV_VAR, VEHICLE_NUM_FEATURES, VEHICLE_SHA256, load_vehicle

DATASET_NAMES = ("synthetic", "vehicle")

RawDevice = Callable[[int], tuple[np.ndarray, np.ndarray]]


def build_dataset(
    name: str,
    *,
    path: str | os.PathLike[str] | None = None,
    seed: int = 0,
    num_devices: int = 100,
    alpha: float = 1.0,
    beta: float = 1.0,
    max_samples: int | None = 1000,
    train_fraction: float = 0.8,
    val_fraction: float = 0.1,
    test_fraction: float = 0.1,
    noise: str = "none",
    noisy_devices: Iterable[int] = (),
    num_noisy: int = 0,
    noise_scale: float = 10.0,
    sha256: str | None = VEHICLE_SHA256,
    minority: int = 0,
    concept_noise: float = 0.0,
    samples_per_device: int | None = None,
) -> FederatedDataset:
    """Build a federated dataset whose devices are generated or split lazily, on first access.

    Settings are validated here, at once; a device's arrays are made when
    ``dataset.device(k)`` is first called, from ``(seed, k)`` alone.

    Parameters
    ----------
    name : {"synthetic", "vehicle"}
        "synthetic" is Synthetic(alpha, beta) (60 features, 10 classes), the
        default that needs no file; "vehicle" is the SensIT sensor data read
        from ``path`` (23 devices, 100 features, 2 classes).
    path : str or PathLike, optional
        The vehicle JSON file; required for "vehicle", ignored otherwise.
        This function does not read ``TERM_FL_VEHICLE_DATA``: the caller
        (the scenario config) resolves it.
    seed : int, default 0
        Seeds the synthetic generator, the per-device splits and the noise.
        Different seeds re-split the vehicle devices.
    num_devices : int, default 100
        Number of synthetic devices (vehicle: given by the file).
    alpha, beta : float, default 1.0
        Synthetic variances of the model means and of the feature means.
    max_samples : int or None, default 1000
        Cap on a synthetic device's size (FedProx sizes are
        floor(lognormal(4, 2)) + 50, with a heavy tail); None caps nothing.
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
    noise_scale : float, default 10.0
        Feature factor of "scale_features".
    sha256 : str or None, default VEHICLE_SHA256
        Expected sha256 of the vehicle file (the published
        ``vehicle_fewshot.json``); another file's hash, ``"any"`` or None
        accepts that file (see :func:`term_fl.data.vehicle.load_vehicle`).
        Ignored for "synthetic".
    minority, concept_noise, samples_per_device : synthetic only
        Two shared concepts with ``minority`` devices following the second
        (0: one concept per device), each device's own part scaled by
        ``concept_noise``; every device of ``samples_per_device`` samples
        (None: lognormal sizes). See :class:`~term_fl.data.synthetic.SyntheticGenerator`.

    Returns
    -------
    FederatedDataset
        With ``metadata`` holding the name, seed, split fractions, per-device
        split sizes, the noise ``{kind, devices, scale}`` and either the
        generator parameters (synthetic) or the file's path, sha256 and user
        ids (vehicle).
    """
    if name not in DATASET_NAMES:
        raise ValueError(f"unknown dataset {name!r}; expected one of {', '.join(DATASET_NAMES)}")
    seed = check_seed(seed)
    fractions = check_fractions(train_fraction, val_fraction, test_fraction)
    check_noise(noise, noise_scale)

    source: dict[str, Any]
    if name == "synthetic":
        generator = SyntheticGenerator(seed, num_devices, alpha, beta, max_samples, minority, concept_noise,
                                       samples_per_device)
        raw_device: RawDevice = generator.device
        sizes: Sequence[int] = [int(n) for n in generator.sizes]
        device_names = [f"synthetic device {k}" for k in range(len(sizes))]
        num_features, num_classes = NUM_FEATURES, NUM_CLASSES
        source = {"generator": generator.metadata()}
    else:
        if minority or concept_noise or samples_per_device is not None:
            raise ValueError("minority, concept_noise and samples_per_device are settings of the synthetic data "
                             "only; leave them unset for the vehicle data")
        if path is None:
            raise DataError(
                "the vehicle dataset needs the path of its JSON file: the shared vehicle_fewshot.json "
                f"(shared/data/vehicle/ in the workspace), given as path= or, in a scenario, via {VEHICLE_ENV_VAR}"
            )
        vehicle = load_vehicle(path, sha256=sha256)
        raw_device = vehicle.devices.__getitem__
        sizes = vehicle.sizes
        device_names = [f"{vehicle.path}: device {k} ({user!r})" for k, user in enumerate(vehicle.users)]
        num_features, num_classes = VEHICLE_NUM_FEATURES, 2
        source = {"path": vehicle.path, "sha256": vehicle.sha256, "users": list(vehicle.users)}

    counts = [split_sizes(n, fractions, device=device_names[k]) for k, n in enumerate(sizes)]
    noisy = select_noisy_devices(
        noise, len(sizes), seed=seed, noisy_devices=noisy_devices, num_noisy=num_noisy
    )
    noisy_set = frozenset(noisy)

    def build_device(k: int) -> DeviceData:
        x, y = raw_device(k)
        train, val, test = split_indices(len(y), fractions, device_rng(seed, k, SPLIT_TAG), device=device_names[k])
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
        "num_features": num_features,
        "num_classes": num_classes,
        **source,
        "fractions": {"train": fractions[0], "val": fractions[1], "test": fractions[2]},
        "sizes": {split: [c[i] for c in counts] for i, split in enumerate(("train", "val", "test"))},
        "noise": noise_metadata(noise, noisy, noise_scale),
    }
    return FederatedDataset(name, len(sizes), num_features, num_classes, metadata, build_device)


def dataset_for(scenario: Any) -> FederatedDataset:
    """The dataset a scenario's ``[data]`` table describes (seeded by ``data.seed``, else ``run.seed``).

    ``scenario`` is a :class:`term_fl.config.Scenario` (read, not imported:
    this package needs only numpy). Every field of ``[data]`` but ``name``
    and ``seed`` is a keyword argument of :func:`build_dataset` of the same
    name. Devices are built lazily, on first access.
    """
    settings = scenario.data.model_dump(exclude={"name", "seed"})
    return build_dataset(scenario.data.name, seed=scenario.data_seed, **settings)
