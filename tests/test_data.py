"""Tests of term_fl.data: the vehicle loader, Synthetic(alpha, beta), splits, noise, build_dataset.

The real vehicle file is read from $TERM_FL_VEHICLE_DATA or the shared path;
its tests skip when it is absent. Malformed files are written by the tests.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from term_fl.data import (
    ANY_SHA256,
    VEHICLE_SHA256,
    DATASETS,
    NOISE_KINDS,
    DATA_SPLITS as SPLITS,
    DataError,
    DeviceData,
    build_dataset,
    load_vehicle,
    split_indices,
    split_sizes,
)
from term_fl.data.synthetic import SyntheticGenerator

SHARED_VEHICLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "vehicle" / "vehicle_fewshot.json"
VEHICLE_PATH = Path(os.environ.get("TERM_FL_VEHICLE_DATA", SHARED_VEHICLE))
needs_vehicle = pytest.mark.skipif(
    not VEHICLE_PATH.is_file(),
    reason=f"vehicle data not found at {VEHICLE_PATH} (set TERM_FL_VEHICLE_DATA to vehicle_fewshot.json)",
)

SMALL = dict(num_devices=12, max_samples=200)


# --------------------------------------------------------------------------- helpers


def write_vehicle(tmp_path: Path, content: object, name: str = "vehicle.json") -> Path:
    """Write ``content`` as JSON (or as raw text when it is a str) and return the path."""
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def vehicle_content(sizes=(5, 3, 7), num_features=100, seed=0) -> dict:
    """A valid vehicle file: device k has sizes[k] samples, labels alternating +1 / -1."""
    rng = np.random.default_rng(seed)
    users = [f"f_{k:05d}" for k in range(len(sizes))]
    user_data = {
        user: {
            "x": rng.normal(size=(n, num_features)).round(6).tolist(),
            "y": [[1] if i % 2 == 0 else [-1] for i in range(n)],
        }
        for user, n in zip(users, sizes, strict=True)
    }
    return {"users": users, "num_samples": list(sizes), "user_data": user_data}


def sorted_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Samples as rows (features + label), sorted: equal multisets give equal arrays."""
    rows = np.column_stack([x.astype(np.float64), y.astype(np.float64)])
    return rows[np.lexsort(rows.T[::-1])]


def assert_partition(data: DeviceData, x: np.ndarray, y: np.ndarray) -> None:
    """The three splits hold exactly the samples (x, y): none lost, none duplicated."""
    xs = np.concatenate([data.split(s)[0] for s in SPLITS])
    ys = np.concatenate([data.split(s)[1] for s in SPLITS])
    assert len(ys) == len(y)
    np.testing.assert_array_equal(sorted_rows(xs, ys), sorted_rows(x, y))


def assert_same_device(a: DeviceData, b: DeviceData) -> None:
    for split in SPLITS:
        for got, want in zip(a.split(split), b.split(split), strict=True):
            np.testing.assert_array_equal(got, want)


# --------------------------------------------------------------------------- vehicle, real file


@needs_vehicle
def test_real_vehicle_file_has_the_documented_shape():
    data = load_vehicle(VEHICLE_PATH)
    sizes = data.sizes
    ys = np.concatenate([y for _, y in data.devices])
    assert len(data.devices) == 23 and len(data.users) == 23
    assert data.users[0] == "f_00000" and data.users[-1] == "f_00022"
    assert sum(sizes) == 1860
    assert (min(sizes), max(sizes)) == (7, 534)
    assert all(x.shape == (len(y), 100) and x.dtype == np.float32 for x, y in data.devices)
    assert ys.dtype == np.int64 and set(np.unique(ys)) == {0, 1}
    assert (int((ys == 1).sum()), int((ys == 0).sum())) == (1023, 837)
    assert data.sha256 == VEHICLE_SHA256


@needs_vehicle
def test_real_vehicle_plus_minus_labels_keep_the_signs():
    zero_one = load_vehicle(VEHICLE_PATH)
    signs = load_vehicle(VEHICLE_PATH, labels="plus_minus")
    for (_, y01), (_, ypm) in zip(zero_one.devices, signs.devices, strict=True):
        np.testing.assert_array_equal(ypm, 2 * y01 - 1)


@needs_vehicle
def test_real_vehicle_dataset_splits_every_device_at_50_20_30():
    raw = load_vehicle(VEHICLE_PATH)
    dataset = build_dataset(
        "vehicle", path=VEHICLE_PATH, seed=3, train_fraction=0.5, val_fraction=0.2, test_fraction=0.3
    )
    assert (dataset.num_devices, dataset.num_features, dataset.num_classes) == (23, 100, 2)
    assert dataset.metadata["sha256"] == VEHICLE_SHA256
    assert dataset.metadata["path"] == str(VEHICLE_PATH.resolve())
    json.dumps(dataset.metadata)
    for k in range(dataset.num_devices):
        device = dataset.device(k)
        assert all(device.num_examples(s) >= 1 for s in SPLITS)
        assert_partition(device, *raw.devices[k])
    smallest = dataset.device(raw.sizes.index(7))
    assert [smallest.num_examples(s) for s in SPLITS] == [4, 1, 2]


# --------------------------------------------------------------------------- vehicle, small files


def test_small_vehicle_file_loads_in_user_order_with_class_indices(tmp_path):
    content = vehicle_content(sizes=(5, 3, 7), num_features=4)
    content["user_data"] = dict(reversed(content["user_data"].items()))  # file order = 'users' order
    data = load_vehicle(write_vehicle(tmp_path, content), num_features=4, sha256=ANY_SHA256)
    assert data.users == ("f_00000", "f_00001", "f_00002")
    assert data.sizes == [5, 3, 7]
    np.testing.assert_array_equal(data.devices[0][1], [1, 0, 1, 0, 1])
    np.testing.assert_allclose(data.devices[2][0], np.array(content["user_data"]["f_00002"]["x"]), rtol=1e-6)


def test_scalar_labels_and_missing_num_samples_are_accepted(tmp_path):
    content = vehicle_content(sizes=(4,), num_features=2)
    del content["num_samples"]
    content["user_data"]["f_00000"]["y"] = [1, -1, -1, 1]
    data = load_vehicle(write_vehicle(tmp_path, content), labels="plus_minus", num_features=2, sha256=ANY_SHA256)
    np.testing.assert_array_equal(data.devices[0][1], [1, -1, -1, 1])


MALFORMED = {
    "missing users": (lambda c: c.pop("users"), r"missing key 'users'"),
    "missing user_data": (lambda c: c.pop("user_data"), r"missing key 'user_data'"),
    "missing x": (lambda c: c["user_data"]["f_00001"].pop("x"), r"device 1 \('f_00001'\) has no key 'x'"),
    "missing y": (lambda c: c["user_data"]["f_00001"].pop("y"), r"device 1 \('f_00001'\) has no key 'y'"),
    "user without data": (
        (lambda c: c["user_data"].pop("f_00002")),
        r"device 2 \('f_00002'\) is listed in 'users' but has no entry in 'user_data'",
    ),
    "x and y lengths differ": (
        (lambda c: c["user_data"]["f_00001"]["y"].pop()),
        r"device 1 \('f_00001'\) has 3 samples in 'x' but 2 labels in 'y'",
    ),
    "wrong feature count": (
        (lambda c: c["user_data"]["f_00002"]["x"][4].pop()),
        r"device 2 \('f_00002'\), sample 4: expected 100 features, got 99 features",
    ),
    "label outside -1/+1": (
        (lambda c: c["user_data"]["f_00000"]["y"].__setitem__(3, [0])),
        r"device 0 \('f_00000'\), sample 3: label \[0\] is not -1 or \+1",
    ),
    "label 2": (
        (lambda c: c["user_data"]["f_00000"]["y"].__setitem__(1, 2)),
        r"device 0 \('f_00000'\), sample 1: label 2 is not -1 or \+1",
    ),
    "num_samples disagrees": (
        (lambda c: c["num_samples"].__setitem__(1, 4)),
        r"num_samples\[1\] = 4 but device 1 \('f_00001'\) has 3 samples",
    ),
    "num_samples too short": (
        (lambda c: c["num_samples"].pop()),
        r"'num_samples' must list one count per user \(3\), got 2",
    ),
    "x empty, y not": (
        lambda c: c["user_data"]["f_00001"].update(x=[]),
        r"device 1 \('f_00001'\) has 0 samples in 'x' but 3 labels",
    ),
    "empty device, x and y": (
        (lambda c: c["user_data"]["f_00001"].update(x=[], y=[])),
        r"device 1 \('f_00001'\) has no samples",
    ),
    "non-numeric feature": (
        (lambda c: c["user_data"]["f_00000"]["x"][0].__setitem__(0, "a")),
        r"device 0 \('f_00000'\): features must be numbers",
    ),
    "empty object": (lambda c: c.clear(), r"missing key 'users'"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_vehicle_files_raise_data_error_naming_file_and_problem(tmp_path, case):
    content = vehicle_content(sizes=(5, 3, 7))
    edit, message = MALFORMED[case]
    edit(content)
    path = write_vehicle(tmp_path, content)
    with pytest.raises(DataError, match=message) as info:
        load_vehicle(path, sha256=ANY_SHA256)
    assert str(path) in str(info.value)


def test_vehicle_file_other_than_the_published_one_is_refused_naming_both_hashes(tmp_path):
    path = write_vehicle(tmp_path, vehicle_content(sizes=(5, 3, 7)))
    actual = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(DataError) as info:
        load_vehicle(path)
    message = str(info.value)
    assert str(path) in message and "sha256 mismatch" in message
    assert f"expected {VEHICLE_SHA256}" in message and f"actual {actual}" in message
    assert f"data.sha256={actual}" in message  # how to accept it knowingly
    with pytest.raises(DataError, match="sha256 mismatch"):
        build_dataset("vehicle", path=path)


def test_another_vehicle_file_is_accepted_by_its_own_hash_or_any(tmp_path):
    path = write_vehicle(tmp_path, vehicle_content(sizes=(5, 3, 7)))
    actual = hashlib.sha256(path.read_bytes()).hexdigest()
    assert load_vehicle(path, sha256=actual).sha256 == actual
    assert load_vehicle(path, sha256=actual.upper()).sha256 == actual
    assert load_vehicle(path, sha256=ANY_SHA256).sizes == [5, 3, 7]
    assert load_vehicle(path, sha256=None).sizes == [5, 3, 7]
    assert build_dataset("vehicle", path=path, sha256=actual).metadata["sha256"] == actual
    with pytest.raises(DataError, match=r"expected 0{64} \(data.sha256\)"):
        load_vehicle(path, sha256="0" * 64)


def test_a_changed_byte_in_the_vehicle_file_is_caught(tmp_path):
    path = write_vehicle(tmp_path, vehicle_content(sizes=(5, 3, 7)))
    accepted = hashlib.sha256(path.read_bytes()).hexdigest()
    load_vehicle(path, sha256=accepted)
    text = path.read_text()
    path.write_text(text.replace("-", "+", 1).replace("+", "", 1))  # same JSON shape, one value changed
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    with pytest.raises(DataError, match="sha256 mismatch"):
        load_vehicle(path, sha256=accepted)


def test_missing_vehicle_file_says_where_the_data_comes_from(tmp_path):
    missing = tmp_path / "nowhere.json"
    with pytest.raises(DataError, match=r"not found: .*nowhere\.json.*vehicle_fewshot\.json.*TERM_FL_VEHICLE_DATA"):
        load_vehicle(missing)


def test_file_that_is_not_json_is_refused(tmp_path):
    path = write_vehicle(tmp_path, "{users: [")
    with pytest.raises(DataError, match=r"vehicle\.json: not a valid JSON file"):
        load_vehicle(path, sha256=ANY_SHA256)


def test_json_that_is_not_an_object_is_refused(tmp_path):
    with pytest.raises(DataError, match=r"expected a JSON object .* got list"):
        load_vehicle(write_vehicle(tmp_path, [1, 2]), sha256=ANY_SHA256)


def test_data_error_is_a_value_error():
    assert issubclass(DataError, ValueError)


def test_feature_count_can_be_given(tmp_path):
    path = write_vehicle(tmp_path, vehicle_content(sizes=(3,), num_features=5))
    assert load_vehicle(path, num_features=5, sha256=ANY_SHA256).devices[0][0].shape == (3, 5)
    with pytest.raises(DataError, match=r"sample 0: expected 6 features, got 5 features"):
        load_vehicle(path, num_features=6, sha256=ANY_SHA256)


def test_unknown_label_mode_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"labels must be one of zero_one, plus_minus"):
        load_vehicle(write_vehicle(tmp_path, vehicle_content()), labels="signs", sha256=ANY_SHA256)


def test_vehicle_parse_is_cached_until_the_file_changes(tmp_path):
    path = write_vehicle(tmp_path, vehicle_content(sizes=(5, 3, 7)))
    first = load_vehicle(path, sha256=ANY_SHA256)
    assert load_vehicle(path, sha256=ANY_SHA256) is first
    assert not first.devices[0][0].flags.writeable
    path.write_text(json.dumps(vehicle_content(sizes=(4, 4))))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert load_vehicle(path, sha256=ANY_SHA256).sizes == [4, 4]


def test_small_vehicle_dataset_splits_and_reports_sha256(tmp_path):
    content = vehicle_content(sizes=(7, 3, 20))
    path = write_vehicle(tmp_path, content)
    dataset = build_dataset(
        "vehicle", path=path, train_fraction=0.5, val_fraction=0.2, test_fraction=0.3, sha256=ANY_SHA256
    )
    raw = load_vehicle(path, sha256=ANY_SHA256)
    assert dataset.metadata["sha256"] == raw.sha256 and len(raw.sha256) == 64
    assert dataset.metadata["users"] == ["f_00000", "f_00001", "f_00002"]
    assert dataset.metadata["sizes"] == {"train": [4, 1, 10], "val": [1, 1, 4], "test": [2, 1, 6]}
    for k in range(3):
        assert_partition(dataset.device(k), *raw.devices[k])


def test_vehicle_device_too_small_to_split_is_named(tmp_path):
    content = vehicle_content(sizes=(5, 2))
    with pytest.raises(DataError, match=r"device 1 \('f_00001'\) has 2 samples; at least 3"):
        build_dataset("vehicle", path=write_vehicle(tmp_path, content), sha256=ANY_SHA256)


def test_vehicle_needs_a_path():
    with pytest.raises(DataError, match=r"needs the path .*vehicle_fewshot\.json.*TERM_FL_VEHICLE_DATA"):
        build_dataset("vehicle")


# --------------------------------------------------------------------------- synthetic


def test_synthetic_same_seed_gives_identical_arrays_and_other_seed_differs():
    a = build_dataset("synthetic", seed=7, **SMALL)
    b = build_dataset("synthetic", seed=7, **SMALL)
    c = build_dataset("synthetic", seed=8, **SMALL)
    for k in (0, 5, 11):
        assert_same_device(a.device(k), b.device(k))
    assert a.metadata == b.metadata
    assert a.metadata["sizes"] != c.metadata["sizes"]
    assert not np.array_equal(a.device(0).x_test[:1], c.device(0).x_test[:1])


def test_synthetic_device_does_not_depend_on_other_devices_being_built():
    alone = build_dataset("synthetic", seed=4, **SMALL).device(9)
    everything = build_dataset("synthetic", seed=4, **SMALL)
    for k in range(everything.num_devices):
        everything.device(k)
    assert_same_device(alone, everything.device(9))
    assert everything.device(9) is everything.device(9)  # cached


def test_synthetic_device_k_depends_only_on_seed_and_k():
    """Adding devices does not change the existing ones (a client needs only its own index)."""
    few = SyntheticGenerator(seed=2, num_devices=5, alpha=1.0, beta=1.0, max_samples=300)
    many = SyntheticGenerator(seed=2, num_devices=10_000, alpha=1.0, beta=1.0, max_samples=300)
    np.testing.assert_array_equal(few.sizes, many.sizes[:5])
    for got, want in zip(few.device(3), many.device(3), strict=True):
        np.testing.assert_array_equal(got, want)


def test_synthetic_shapes_types_and_size_bounds():
    dataset = build_dataset("synthetic", seed=1, num_devices=300, max_samples=400)
    assert (dataset.num_devices, dataset.num_features, dataset.num_classes) == (300, 60, 10)
    totals = np.sum([dataset.metadata["sizes"][s] for s in SPLITS], axis=0)
    assert totals.min() >= 50 and totals.max() <= 400
    assert (totals == 400).any() and (totals < 400).any()  # the cap binds for some devices only
    for k in (0, int(np.argmax(totals))):
        device = dataset.device(k)
        for split in SPLITS:
            x, y = device.split(split)
            assert x.dtype == np.float32 and x.shape == (device.num_examples(split), 60)
            assert y.dtype == np.int64 and y.min() >= 0 and y.max() < 10
        assert sum(device.num_examples(s) for s in SPLITS) == totals[k]


def test_synthetic_sizes_follow_fedprox_lognormal_plus_50():
    """Uncapped sizes: log(size - 50) is about N(4, 2) (integer part of the lognormal)."""
    sizes = SyntheticGenerator(seed=0, num_devices=4000, alpha=1.0, beta=1.0, max_samples=None).sizes
    assert sizes.min() >= 50
    logs = np.log(sizes[sizes > 50] - 50 + 0.5)
    assert abs(np.median(logs) - 4.0) < 0.15
    assert abs(np.subtract(*np.percentile(logs, [84, 16])) / 2 - 2.0) < 0.15


def test_synthetic_feature_variances_are_j_to_the_minus_1_2():
    generator = SyntheticGenerator(seed=0, num_devices=5000, alpha=1.0, beta=1.0, max_samples=None)
    k = int(np.flatnonzero((generator.sizes > 20_000) & (generator.sizes < 200_000))[0])
    x, _ = generator.device(k)
    expected = np.arange(1, 61) ** -1.2
    np.testing.assert_allclose(x.var(axis=0), expected, rtol=0.05)


def test_synthetic_devices_are_heterogeneous():
    """Label distributions and feature means differ measurably across devices."""
    dataset = build_dataset("synthetic", seed=0, num_devices=20, max_samples=1000)
    histograms = []
    means = []
    for k in range(dataset.num_devices):
        x, y = dataset.device(k).split("train")
        histograms.append(np.bincount(y, minlength=10) / len(y))
        means.append(x.mean(axis=0))
    histograms, means = np.array(histograms), np.array(means)
    total_variation = 0.5 * np.abs(histograms[:, None, :] - histograms[None, :, :]).sum(axis=2)
    assert np.median(total_variation[np.triu_indices(20, 1)]) > 0.5
    # v_k ~ N(B_k, 1) with B_k ~ N(0, 1): device means of a feature spread with std about sqrt(2).
    assert means[:, 0].std() > 0.7


def test_synthetic_with_zero_variances_is_less_heterogeneous_in_features():
    def spread(beta):
        dataset = build_dataset("synthetic", seed=0, num_devices=30, alpha=0.0, beta=beta, max_samples=300)
        return np.std([dataset.device(k).x_train.mean(axis=0) for k in range(30)], axis=0).mean()

    assert spread(0.0) < spread(4.0)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_devices=0), r"num_devices must be an integer >= 1, got 0"),
        (dict(alpha=-1.0), r"alpha \(a variance\) must be a finite number >= 0, got -1.0"),
        (dict(beta=float("nan")), r"beta \(a variance\) must be a finite number >= 0"),
        (dict(max_samples=2), r"max_samples must be None or an integer >= 3, got 2"),
        (dict(seed=-1), r"seed must be an integer >= 0, got -1"),
    ],
)
def test_bad_synthetic_generator_parameters_are_refused(kwargs, message):
    settings = dict(seed=0, num_devices=5, alpha=1.0, beta=1.0, max_samples=None) | kwargs
    with pytest.raises(ValueError, match=message):
        SyntheticGenerator(**settings)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_devices=0), r"dataset synthetic: num_devices: .*greater than or equal to 1 \(got 0\)"),
        (dict(alpha=-1.0), r"dataset synthetic: alpha: .*greater than or equal to 0 \(got -1.0\)"),
        (dict(max_samples=2), r"dataset synthetic: max_samples: .*greater than or equal to 3 \(got 2\)"),
        (dict(seed=-1), r"seed must be an integer >= 0, got -1"),
        (dict(path="x.json"), r"dataset synthetic: path: not a setting of dataset synthetic \(its settings: "
                              r"num_devices, alpha, beta, max_samples, minority, concept_noise, samples_per_device\)"),
    ],
)
def test_bad_synthetic_settings_are_refused_naming_the_dataset(kwargs, message):
    with pytest.raises(ValueError, match=message):
        build_dataset("synthetic", **kwargs)


def test_synthetic_metadata_is_json_and_complete():
    dataset = build_dataset("synthetic", seed=5, num_devices=8, alpha=0.5, beta=0.25, max_samples=300)
    meta = json.loads(json.dumps(dataset.metadata))
    assert meta["name"] == "synthetic" and meta["seed"] == 5 and meta["num_devices"] == 8
    assert meta["generator"]["alpha"] == 0.5 and meta["generator"]["beta"] == 0.25
    assert meta["generator"]["max_samples"] == 300
    assert meta["fractions"] == {"train": 0.8, "val": 0.1, "test": 0.1}
    assert all(len(meta["sizes"][s]) == 8 for s in SPLITS)
    assert meta["noise"] == {"kind": "none", "devices": [], "scale": None}
    device = dataset.device(3)
    assert [device.num_examples(s) for s in SPLITS] == [meta["sizes"][s][3] for s in SPLITS]


# --------------------------------------------------------------------------- splits


@settings(max_examples=200)
@given(
    n=st.integers(3, 3000),
    weights=st.tuples(*[st.floats(0.01, 1.0)] * 3),
    seed=st.integers(0, 2**32 - 1),
)
def test_split_indices_partition_the_samples_and_no_split_is_empty(n, weights, seed):
    fractions = tuple(w / sum(weights) for w in weights)
    parts = split_indices(n, fractions, np.random.default_rng(seed))
    assert all(len(p) >= 1 for p in parts)
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(n))
    if all(f * n >= 1 for f in fractions):
        assert all(abs(len(p) - f * n) <= 1 for p, f in zip(parts, fractions, strict=True))


def test_split_rounding_rule_by_hand():
    assert split_sizes(7, (0.5, 0.2, 0.3)) == (4, 1, 2)  # test round(2.1)=2, val round(1.4)=1
    assert split_sizes(10, (0.8, 0.1, 0.1)) == (8, 1, 1)
    assert split_sizes(5, (0.7, 0.1, 0.2)) == (3, 1, 1)  # val round(0.5)=1 (half up), test 1
    assert split_sizes(3, (0.1, 0.45, 0.45)) == (1, 1, 1)
    assert split_sizes(4, (0.2, 0.4, 0.4)) == (1, 2, 1)  # val 2, test 2 -> train 0: test gives one back
    assert split_sizes(25, (0.8, 0.1, 0.1)) == (19, 3, 3)  # 2.5 rounds half up (Python round() would give 2)


def test_every_split_of_every_synthetic_device_is_non_empty_and_a_partition():
    dataset = build_dataset(
        "synthetic", seed=3, num_devices=10, max_samples=60, train_fraction=0.9, val_fraction=0.05, test_fraction=0.05
    )
    raw = SyntheticGenerator(seed=3, num_devices=10, alpha=1.0, beta=1.0, max_samples=60)
    for k in range(10):
        device = dataset.device(k)
        assert all(device.num_examples(s) >= 1 for s in SPLITS)
        assert_partition(device, *raw.device(k))


def test_splits_change_with_the_seed_on_the_same_data(tmp_path):
    path = write_vehicle(tmp_path, vehicle_content(sizes=(40,)))
    a = build_dataset("vehicle", path=path, seed=0, sha256=ANY_SHA256).device(0)
    b = build_dataset("vehicle", path=path, seed=1, sha256=ANY_SHA256).device(0)
    assert not np.array_equal(a.x_test, b.x_test)


@pytest.mark.parametrize(
    "fractions",
    [(0.8, 0.1, 0.2), (0.9, 0.1, 0.0), (1.2, -0.1, -0.1), (0.5, float("nan"), 0.5)],
)
def test_bad_fractions_are_refused_with_the_fractions_named(fractions):
    train, val, test = fractions
    with pytest.raises(ValueError, match=rf"split fractions must .*train_fraction={train!r}"):
        build_dataset("synthetic", train_fraction=train, val_fraction=val, test_fraction=test)


# --------------------------------------------------------------------------- noise


@pytest.fixture(scope="module")
def clean():
    return build_dataset("synthetic", seed=11, **SMALL)


def noisy(kind, **kwargs):
    return build_dataset("synthetic", seed=11, noise=kind, **SMALL, **kwargs)


@pytest.mark.parametrize("kind", ["random_labels", "flip_labels", "scale_features"])
def test_noise_changes_only_chosen_devices_train_and_val(clean, kind):
    dataset = noisy(kind, noisy_devices=[3, 1], noise_scale=5.0)
    assert dataset.metadata["noise"] == {
        "kind": kind,
        "devices": [1, 3],
        "scale": 5.0 if kind == "scale_features" else None,
    }
    for k in range(dataset.num_devices):
        got, want = dataset.device(k), clean.device(k)
        np.testing.assert_array_equal(got.x_test, want.x_test)
        np.testing.assert_array_equal(got.y_test, want.y_test)
        if k not in (1, 3):
            assert_same_device(got, want)
            continue
        for split in ("train", "val"):
            (x, y), (x0, y0) = got.split(split), want.split(split)
            if kind == "random_labels":
                np.testing.assert_array_equal(x, x0)
                assert y.min() >= 0 and y.max() < 10
            elif kind == "flip_labels":
                np.testing.assert_array_equal(x, x0)
                np.testing.assert_array_equal(y, (y0 + 1) % 10)
            else:
                np.testing.assert_array_equal(y, y0)
                np.testing.assert_allclose(x, x0 * 5.0, rtol=1e-6)
                assert x.dtype == np.float32
        if kind == "random_labels":
            changed = np.mean(got.y_train != want.y_train)
            assert 0.7 < changed < 1.0  # uniform over 10 classes: about 90% change


def test_flip_labels_on_binary_data_is_one_minus_y(tmp_path):
    path = write_vehicle(tmp_path, vehicle_content(sizes=(20, 20)))
    clean_v = build_dataset("vehicle", path=path, seed=2, sha256=ANY_SHA256)
    flipped = build_dataset(
        "vehicle", path=path, seed=2, noise="flip_labels", noisy_devices=[0], sha256=ANY_SHA256
    )
    np.testing.assert_array_equal(flipped.device(0).y_train, 1 - clean_v.device(0).y_train)
    np.testing.assert_array_equal(flipped.device(0).y_test, clean_v.device(0).y_test)
    assert_same_device(flipped.device(1), clean_v.device(1))


def test_noise_is_reproducible():
    a = noisy("random_labels", num_noisy=4)
    b = noisy("random_labels", num_noisy=4)
    assert a.metadata["noise"] == b.metadata["noise"]
    for k in a.metadata["noise"]["devices"]:
        assert_same_device(a.device(k), b.device(k))


def test_num_noisy_chooses_devices_from_the_seed():
    chosen = noisy("random_labels", num_noisy=4).metadata["noise"]["devices"]
    assert len(chosen) == 4 and chosen == sorted(chosen) and len(set(chosen)) == 4
    assert all(0 <= d < SMALL["num_devices"] for d in chosen)
    other_seed = build_dataset("synthetic", seed=12, noise="random_labels", num_noisy=4, **SMALL)
    assert other_seed.metadata["noise"]["devices"] != chosen


def test_noise_none_or_no_devices_leaves_the_data_clean(clean):
    for dataset in (noisy("none", noisy_devices=[2]), noisy("flip_labels")):
        assert dataset.metadata["noise"]["devices"] == []
        assert_same_device(dataset.device(2), clean.device(2))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(noisy_devices=[5, 12, -1]), r"noisy_devices \[12, -1\] are not device indices in the range 0\.\.11"),
        (dict(num_noisy=13), r"num_noisy must be in 0\.\.12"),
        (dict(noisy_devices=[1], num_noisy=2), r"either noisy_devices or num_noisy, not both"),
    ],
)
def test_bad_noisy_devices_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        noisy("random_labels", **kwargs)


def test_bad_noise_settings_are_refused():
    with pytest.raises(ValueError, match=r"unknown noise kind 'gaussian'; expected one of none, random_labels"):
        noisy("gaussian")
    with pytest.raises(ValueError, match=r"noise_scale must be a finite number"):
        noisy("scale_features", noisy_devices=[0], noise_scale=float("inf"))
    assert NOISE_KINDS == ("none", "random_labels", "flip_labels", "scale_features")


# --------------------------------------------------------------------------- build_dataset and containers


def test_unknown_dataset_name_lists_the_allowed_names():
    with pytest.raises(ValueError, match=r"unknown dataset 'mnist'; expected one of synthetic, vehicle"):
        build_dataset("mnist")
    assert tuple(DATASETS) == ("synthetic", "vehicle")


@pytest.mark.parametrize("k", [-1, 12, 100])
def test_device_index_out_of_range_names_the_range(clean, k):
    with pytest.raises(IndexError, match=rf"device index {k} is out of range 0\.\.11"):
        clean.device(k)


def test_device_index_must_be_an_integer(clean):
    with pytest.raises(TypeError, match="device index must be an integer"):
        clean.device(1.0)
    assert clean.device(np.int64(2)) is clean.device(2)


def test_device_data_split_accessors(clean):
    device = clean.device(0)
    x, y = device.split("val")
    assert x is device.x_val and y is device.y_val
    assert device.num_examples("test") == len(device.y_test)
    with pytest.raises(ValueError, match=r"unknown split 'validation'; expected one of train, val, test"):
        device.split("validation")


def test_device_data_checks_dtypes_and_lengths():
    x = np.zeros((3, 2), dtype=np.float32)
    y = np.zeros(3, dtype=np.int64)
    with pytest.raises(TypeError, match=r"x_val must be a float32 array"):
        DeviceData(x, y, x.astype(np.float64), y, x, y)
    with pytest.raises(ValueError, match=r"x_test has 3 samples but y_test has 2"):
        DeviceData(x, y, x, y, x, y[:2])


def test_every_data_setting_of_a_scenario_is_an_argument_of_build_dataset():
    """dataset_for passes the [data] table through: a new setting needs no third place to be plumbed."""
    import inspect

    from term_fl.config import DataConfig, load_scenario
    from term_fl.data import DATASETS, dataset_for

    shared = set(inspect.signature(build_dataset).parameters) - {"name", "settings"}
    assert set(DataConfig.shared_keys()) == shared
    for name, spec in DATASETS.items():  # each dataset's sub-table is its settings model
        assert set(DataConfig.alternatives[name].model_fields) == set(spec.settings.model_fields)
    scenario = load_scenario(None, ["data.num_devices=5", "run.clients_per_round=2", "data.noise=flip_labels",
                                    "data.noisy_devices=[3, 1]"],
                             environ={})
    built = dataset_for(scenario)
    expected = build_dataset("synthetic", seed=0, num_devices=5, noise="flip_labels", noisy_devices=(1, 3),
                             max_samples=scenario.data.synthetic.max_samples,
                             samples_per_device=scenario.data.synthetic.samples_per_device, train_fraction=0.6,
                             val_fraction=0.2,
                             test_fraction=0.2)
    assert built.metadata == expected.metadata
    assert np.array_equal(built.device(3).y_train, expected.device(3).y_train)


@pytest.mark.parametrize("max_samples", [60, 200, 1000])
def test_the_expected_device_size_is_the_mean_of_generated_sizes(max_samples):
    """The closed form behind data.size_limit_gb's estimate against 200,000 generated device sizes (the
    floor it leaves out moves the mean by less than one sample)."""
    from term_fl.data.synthetic import expected_device_size

    sizes = SyntheticGenerator(0, 200_000, 1.0, 1.0, max_samples).sizes
    assert expected_device_size(max_samples) == pytest.approx(sizes.mean(), rel=0.02, abs=1.0)


def test_the_size_limit_refuses_by_the_estimate_and_names_it():
    from term_fl.data.registry import DATASETS, check_data_size
    from term_fl.data.synthetic import BYTES_PER_SAMPLE, SyntheticSettings, expected_device_size

    settings = SyntheticSettings(num_devices=1000, max_samples=1000)
    gb = 1000 * expected_device_size(1000) * BYTES_PER_SAMPLE / 1e9  # about 0.04 GB
    check_data_size(DATASETS["synthetic"], settings, gb * 1.01)
    with pytest.raises(ValueError, match=rf"data.synthetic.num_devices = 1000, data.synthetic.max_samples = 1000: "
                                         rf"the data would take about {gb:,.1f} GB"):
        check_data_size(DATASETS["synthetic"], settings, gb * 0.99)
