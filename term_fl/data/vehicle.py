"""Loader of the vehicle sensor data (SensIT, LEAF-style JSON), one device per sensor.

Format (see README.md beside the shared ``vehicle_fewshot.json``)::

    {"users": ["f_00000", ...],
     "num_samples": [59, ...],                      # optional, checked when present
     "user_data": {"f_00000": {"x": [[100 floats], ...], "y": [[1] or [-1], ...]}}}

A label may be written ``[1]`` or ``1``. Labels +1 / -1 become class indices
1 / 0 (``labels="zero_one"``, the default) or stay as signs
(``labels="plus_minus"``). Devices keep the file's user order.

Parsing is cached per (path, modification time, size, options), so many
clients in one process parse the file once; the cached arrays are
read-only.

The file's sha256 is checked against :data:`VEHICLE_SHA256`, the published
few-shot slice (Ditto fork, commit 602f571; see the README's "Data" section),
before anything is parsed: another file gives other results under the same
scenario name. ``sha256=`` (the scenario's ``data.sha256``) accepts another
file knowingly: its own hash, or :data:`ANY_SHA256` to skip the check.

:class:`VehicleSettings` are the dataset's settings (a scenario's
``[data.vehicle]`` table: the file and its expected sha256),
:func:`vehicle_source` its builder and :func:`check_vehicle_file` the check
that runs before a scenario starts: the dataset registry
(:mod:`term_fl.data.registry`) names them.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BeforeValidator, Field, field_validator

from term_fl.common.digest import file_digest
from term_fl.common.settings import NOT_HASHED, DigestOf, PathSetting, SettingsModel

from .errors import DataError, DataSettingError
from .types import DeviceSource

VEHICLE_ENV_VAR = "TERM_FL_VEHICLE_DATA"
# sha256 of vehicle_fewshot.json as published (Ditto fork, commit 602f571,
# data/vehicle/data/train/mytrain.json): the file every vehicle scenario expects.
VEHICLE_SHA256 = "a8c8b22a89ea64e5a563cffe94352b48c1f44a02100fd3256adfc09dc43d9ddc"
ANY_SHA256 = "any"  # data.sha256 = "any": accept whatever file data.path names
VEHICLE_NUM_FEATURES = 100
LABEL_MODES = ("zero_one", "plus_minus")

_WHERE_FROM = (
    "The vehicle data is the shared file vehicle_fewshot.json "
    "(shared/data/vehicle/ in the workspace, see its README.md); "
    f"pass its path, or set {VEHICLE_ENV_VAR} to it."
)


@dataclass(frozen=True, eq=False)
class VehicleData:
    """The parsed vehicle file.

    Attributes
    ----------
    path : str
        Absolute path of the file.
    sha256 : str
        Hex digest of the file's bytes.
    users : tuple of str
        Device ids in the file's order.
    devices : tuple of (x, y)
        Per device, ``x`` float32 ``(n, num_features)`` and ``y`` int64
        ``(n,)`` (0/1 or -1/+1 by ``labels``); read-only arrays.
    labels : str
        "zero_one" or "plus_minus".
    """

    path: str
    sha256: str
    users: tuple[str, ...]
    devices: tuple[tuple[np.ndarray, np.ndarray], ...]
    labels: str

    @property
    def sizes(self) -> list[int]:
        """Samples per device."""
        return [len(y) for _, y in self.devices]


def load_vehicle(
    path: str | os.PathLike[str],
    *,
    labels: Literal["zero_one", "plus_minus"] = "zero_one",
    num_features: int = VEHICLE_NUM_FEATURES,
    sha256: str | None = VEHICLE_SHA256,
) -> VehicleData:
    """Load and validate a vehicle data file.

    Parameters
    ----------
    path : str or PathLike
        The LEAF-style JSON file (e.g. the shared ``vehicle_fewshot.json``).
    labels : {"zero_one", "plus_minus"}
        "zero_one" maps +1 / -1 to class indices 1 / 0; "plus_minus" keeps
        the signs.
    num_features : int
        Features every sample must have (100 for SensIT).
    sha256 : str or None
        The file's expected sha256 (hex): by default the published
        ``vehicle_fewshot.json``; another file's own hash accepts that file;
        ``None`` or ``"any"`` accepts any file.

    Raises
    ------
    DataError
        Naming the file and the problem: a sha256 other than ``sha256`` (with
        the expected and the actual hash), missing file, not JSON, missing keys,
        a user without data, x / y of different lengths, a wrong feature count,
        a label other than -1 / +1, ``num_samples`` disagreeing with the data,
        an empty device.
    """
    if labels not in LABEL_MODES:
        raise ValueError(f"labels must be one of {', '.join(LABEL_MODES)}, got {labels!r}")
    resolved = Path(path).expanduser().resolve()
    try:
        stat = resolved.stat()
    except FileNotFoundError:
        raise DataError(f"vehicle data file not found: {resolved}. {_WHERE_FROM}") from None
    if not resolved.is_file():
        raise DataError(f"vehicle data path is not a file: {resolved}. {_WHERE_FROM}")
    expected = None if sha256 is None or sha256 == ANY_SHA256 else sha256.lower()
    return _load_cached(str(resolved), stat.st_mtime_ns, stat.st_size, labels, num_features, expected)


def check_sha256(path: str | os.PathLike[str], actual: str, expected: str | None) -> None:
    """Raise :class:`DataError` unless ``actual`` is ``expected`` (None or "any": no check)."""
    if expected is None or expected == ANY_SHA256 or actual == expected.lower():
        return
    what = (
        "the published vehicle_fewshot.json (few-shot SensIT slice)"
        if expected.lower() == VEHICLE_SHA256 else "data.sha256"
    )
    raise DataError(
        f"{path}: sha256 mismatch: expected {expected.lower()} ({what}), actual {actual}. "
        "A different or modified file gives different results under the same scenario. "
        f'To use this file knowingly, set data.sha256 = "{actual}" in the scenario\'s [data] table '
        f'(or --set data.sha256={actual}); data.sha256 = "{ANY_SHA256}" skips the check.'
    )


@lru_cache(maxsize=8)
def _load_cached(
    path: str, mtime_ns: int, size: int, labels: str, num_features: int, sha256: str | None
) -> VehicleData:
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        raise DataError(f"{path}: cannot be read ({err.strerror})") from None
    digest = hashlib.sha256(raw).hexdigest()
    check_sha256(path, digest, sha256)
    try:
        content = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(f"{path}: not a valid JSON file ({err})") from None
    except RecursionError:
        raise DataError(f"{path}: not a vehicle data file (JSON nested too deeply to read)") from None
    users, devices = _parse(content, path, num_features)
    if labels == "zero_one":
        devices = [(x, (y > 0).astype(np.int64)) for x, y in devices]
    for x, y in devices:
        x.setflags(write=False)
        y.setflags(write=False)
    return VehicleData(
        path=path,
        sha256=digest,
        users=tuple(users),
        devices=tuple(devices),
        labels=labels,
    )


def _parse(content: Any, path: str, num_features: int) -> tuple[list[str], list[tuple[np.ndarray, np.ndarray]]]:
    """Validate the decoded JSON; return user ids and per-device (x float32, y int64 in {-1, +1})."""
    if not isinstance(content, dict):
        raise DataError(f"{path}: expected a JSON object with keys 'users' and 'user_data', got {type(content).__name__}")
    for key in ("users", "user_data"):
        if key not in content:
            raise DataError(f"{path}: missing key {key!r} (expected 'users', 'user_data' and optionally 'num_samples')")
    users, user_data = content["users"], content["user_data"]
    if not isinstance(users, list) or not all(isinstance(u, str) for u in users) or not users:
        raise DataError(f"{path}: 'users' must be a non-empty list of device ids")
    if len(set(users)) != len(users):
        raise DataError(f"{path}: 'users' lists a device id more than once")
    if not isinstance(user_data, dict):
        raise DataError(f"{path}: 'user_data' must be an object mapping device ids to {{'x': ..., 'y': ...}}")
    devices = []
    for k, user in enumerate(users):
        name = f"device {k} ({user!r})"
        if user not in user_data:
            raise DataError(f"{path}: {name} is listed in 'users' but has no entry in 'user_data'")
        entry = user_data[user]
        if not isinstance(entry, dict):
            raise DataError(f"{path}: user_data of {name} must be an object with keys 'x' and 'y'")
        for key in ("x", "y"):
            if key not in entry:
                raise DataError(f"{path}: {name} has no key {key!r} in user_data")
            if not isinstance(entry[key], list):
                raise DataError(f"{path}: {name}: {key!r} must be a list")
        if len(entry["x"]) != len(entry["y"]):
            raise DataError(f"{path}: {name} has {len(entry['x'])} samples in 'x' but {len(entry['y'])} labels in 'y'")
        if not entry["y"]:
            raise DataError(f"{path}: {name} has no samples")
        devices.append((_features(entry["x"], path, name, num_features), _labels(entry["y"], path, name)))
    if "num_samples" in content:
        _check_num_samples(content["num_samples"], users, devices, path)
    return users, devices


def _features(rows: list[Any], path: str, name: str, num_features: int) -> np.ndarray:
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != num_features:
            got = f"{len(row)} features" if isinstance(row, list) else type(row).__name__
            raise DataError(f"{path}: {name}, sample {i}: expected {num_features} features, got {got}")
    try:
        x = np.array(rows, dtype=np.float64).reshape(len(rows), num_features)
    except (TypeError, ValueError):
        raise DataError(f"{path}: {name}: features must be numbers") from None
    if not np.isfinite(x).all():
        i = int(np.argwhere(~np.isfinite(x))[0, 0])
        raise DataError(f"{path}: {name}, sample {i}: features must be finite numbers")
    with np.errstate(over="ignore"):  # checked just below, naming the value
        x32 = x.astype(np.float32)
    if not np.isfinite(x32).all():  # finite as float64, beyond float32's range (|x| > 3.4e38)
        i, j = (int(v) for v in np.argwhere(~np.isfinite(x32))[0])
        raise DataError(
            f"{path}: {name}, sample {i}, feature {j}: {x[i, j]:g} overflows float32 "
            f"(features must lie within +-{float(np.finfo(np.float32).max):.3g})"
        )
    return x32


def _labels(values: list[Any], path: str, name: str) -> np.ndarray:
    y = np.empty(len(values), dtype=np.int64)
    for i, value in enumerate(values):
        label = value[0] if isinstance(value, list) and len(value) == 1 else value
        if isinstance(label, bool) or not isinstance(label, (int, float)) or label not in (-1, 1):
            raise DataError(f"{path}: {name}, sample {i}: label {value!r} is not -1 or +1")
        y[i] = int(label)
    return y


def _check_num_samples(num_samples: Any, users: list[str], devices: list[tuple[np.ndarray, np.ndarray]], path: str) -> None:
    if not isinstance(num_samples, list) or len(num_samples) != len(users):
        length = len(num_samples) if isinstance(num_samples, list) else type(num_samples).__name__
        raise DataError(f"{path}: 'num_samples' must list one count per user ({len(users)}), got {length}")
    for k, (count, user, (_, y)) in enumerate(zip(num_samples, users, devices, strict=True)):
        if count != len(y):
            raise DataError(f"{path}: num_samples[{k}] = {count!r} but device {k} ({user!r}) has {len(y)} samples")



def _path_text(value: Any) -> Any:
    return os.fspath(value) if isinstance(value, os.PathLike) else value


class VehicleSettings(SettingsModel):
    """The settings of the vehicle sensor data (a scenario's ``[data.vehicle]`` table)."""

    path: Annotated[str | None, BeforeValidator(_path_text), NOT_HASHED, PathSetting(env=VEHICLE_ENV_VAR)] = Field(
        None, description=f"vehicle JSON file (else ${VEHICLE_ENV_VAR})")
    sha256: Annotated[str, DigestOf("path")] = Field(
        VEHICLE_SHA256,
        pattern=rf"^([0-9a-fA-F]{{64}}|{ANY_SHA256})$",
        description="expected sha256 of the vehicle file (default: the published vehicle_fewshot.json); "
        f"another file's own hash accepts that file knowingly, '{ANY_SHA256}' accepts any",
    )

    @field_validator("sha256")
    @classmethod
    def _lower_case_hash(cls, value: str) -> str:
        return value.lower()


def vehicle_source(settings: VehicleSettings, seed: int) -> DeviceSource:
    """The vehicle file's devices (the file read, checked and cached; ``seed`` only re-splits them)."""
    if settings.path is None:
        raise DataError(
            "the vehicle dataset needs the path of its JSON file: the shared vehicle_fewshot.json "
            f"(shared/data/vehicle/ in the workspace), given as path= or, in a scenario, via {VEHICLE_ENV_VAR}"
        )
    vehicle = load_vehicle(settings.path, sha256=settings.sha256)
    names = [f"{vehicle.path}: device {k} ({user!r})" for k, user in enumerate(vehicle.users)]
    return DeviceSource(vehicle.devices.__getitem__, vehicle.sizes, names, VEHICLE_NUM_FEATURES, 2,
                        {"path": vehicle.path, "sha256": vehicle.sha256, "users": list(vehicle.users)})


def check_vehicle_file(settings: VehicleSettings) -> None:
    """Before a scenario starts: the file is set, exists and has the expected sha256 (DataSettingError otherwise)."""
    where = (
        "the vehicle-sensor data is vehicle_fewshot.json (SensIT, 23 devices; see the README "
        "'Data' section); give its path with --set data.path=PATH, data.path in the scenario "
        f"file, or the environment variable {VEHICLE_ENV_VAR}"
    )
    if not settings.path:
        raise DataSettingError("path", f"not set; {where}")
    if not Path(settings.path).is_file():
        raise DataSettingError("path", f"file {settings.path!r} does not exist; {where}")
    try:
        check_sha256(settings.path, file_digest(settings.path), settings.sha256)
    except DataError as exc:
        raise DataSettingError("sha256", str(exc)) from None
