"""What the flat tables wrote still reads, hashes and generates as before the per-strategy sub-tables.

Before the sub-tables, ``[strategy]``, ``[data]`` and ``[model]`` were each
one flat table. tests/data/flat-tables/ holds what term-fl wrote then
(commit 4403081): every sweep cell of the released scenario files with its
config hash, baseline hash and folder name; variants of the embedded default
written in the flat form; config.json files of runs and their hashes; and
fingerprints of generated data and initial models. The expectations were
computed by that version, not here. The scenario files as released then
(configs/ and the embedded default) are kept in tests/data/flat-tables/released/:
the files in configs/ have moved on since (selection and report seeds).
"""

from __future__ import annotations

import hashlib
import json
import os
import tomllib
from pathlib import Path

import numpy as np
import pytest

from term_fl.cli.sweep import cell_dirname, cell_name
from term_fl.config import (
    VEHICLE_DATA_ENV,
    Scenario,
    baseline_hash,
    config_hash,
    load_scenario,
    reference_scenario,
    sweep_cells,
)
from term_fl.data import build_dataset
from term_fl.learning.models import build_model, get_weights

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "flat-tables"
RELEASED = DATA / "released"
HASHES = json.loads((DATA / "hashes.json").read_text())
VEHICLE = os.environ.get(VEHICLE_DATA_ENV) or "/work/shared/data/vehicle/vehicle_fewshot.json"
HAVE_VEHICLE = Path(VEHICLE).is_file()
needs_vehicle = pytest.mark.skipif(not HAVE_VEHICLE, reason=f"vehicle data not found (set {VEHICLE_DATA_ENV})")
WRITTEN_WITH = "/work/shared/data/vehicle/vehicle_fewshot.json"  # the vehicle path of the runs' config.json


def _source(label: str) -> Path:
    """The file ``label`` named when the hashes were recorded: the released copy of configs/ and the default."""
    if label == "embedded default":
        return RELEASED / "default.toml"
    if label.startswith("configs/"):
        return RELEASED / Path(label).name
    return REPO / label


def _needs_vehicle_file(label: str) -> bool:
    return label in {"configs/vehicle-sensor.toml", "configs/noisy-sensors.toml"}


FILES = sorted({cell["file"] for cell in HASHES["cells"]})


ADDED_SINCE = {"fedavg_uniform", "median", "trimmed_mean", "krum"}
"""Strategies registered after the hashes were recorded: a released file may have gained their cells."""


@pytest.mark.parametrize("label", FILES)
def test_every_released_scenario_expands_to_the_same_cells_folders_and_hashes(label):
    if _needs_vehicle_file(label) and not HAVE_VEHICLE:
        pytest.skip(f"vehicle data not found (set {VEHICLE_DATA_ENV})")
    recorded = [cell for cell in HASHES["cells"] if cell["file"] == label]
    names = {cell["cell"] for cell in recorded}
    # 0.3 tilts TERM t < 0 by median_mad scores by default (strategy.loss_transform = "auto"): its cells are
    # other runs, with other hashes, unless the file keeps 0.2's raw losses (the CHANGELOG's migration)
    kept = ["strategy.loss_transform=none"] if _robust_term_cells(recorded) else None
    got = _cells(label, kept)
    assert [cell for cell in got if cell["cell"] in names] == recorded
    if kept:
        moved = {c["cell"] for c, r in zip([c for c in _cells(label) if c["cell"] in names], recorded, strict=True)
                 if c["hash"] != r["hash"]}
        assert moved == {c["cell"] for c in recorded if c["cell"].startswith("term t=-")}
    # cells added since the hashes were recorded belong to strategies added since
    added = {cell["cell"].split()[0] for cell in got if cell["cell"] not in names}
    assert added <= ADDED_SINCE, added


def _cells(label: str, overrides: list[str] | None = None) -> list[dict]:
    scenario = load_scenario(_source(label), overrides, environ={VEHICLE_DATA_ENV: VEHICLE})
    return [{"file": label, "cell": cell_name(o), "folder": cell_dirname(o), "seed": cell.run.seed,
             "hash": config_hash(cell), "baseline": baseline_hash(cell)} for o, cell in sweep_cells(scenario)]


def _robust_term_cells(cells: list[dict]) -> bool:
    return any(cell["cell"].startswith("term t=-") for cell in cells)


def _flat_file(tmp_path: Path, items: list[str]) -> Path:
    """The embedded default with ``table.key=value`` items written into its flat tables: a file of that time."""
    raw = tomllib.loads((RELEASED / "default.toml").read_text())
    for item in items:
        key, _, text = item.partition("=")
        table, name = key.split(".")
        try:
            value = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            value = text
        raw.setdefault(table, {})[name] = value
    lines = [f"{key} = {json.dumps(value)}" for key, value in raw.items() if not isinstance(value, dict)]
    for table, body in raw.items():
        if isinstance(body, dict):
            lines += [f"[{table}]", *(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in body.items())]
    path = tmp_path / "variant.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


VARIANTS = {tuple(v["set"]): v for v in HASHES["variants"]}


@pytest.mark.parametrize("variant", HASHES["variants"], ids=lambda v: " ".join(v["set"]) or "default")
def test_a_flat_file_hashes_as_before_and_runs_the_same_reference(variant, tmp_path):
    if any("vehicle" in item for item in variant["set"]) and not HAVE_VEHICLE:
        pytest.skip(f"vehicle data not found (set {VEHICLE_DATA_ENV})")
    scenario = load_scenario(_flat_file(tmp_path, variant["set"]), environ={VEHICLE_DATA_ENV: VEHICLE})
    assert scenario.strategy_params() == variant["params"]
    # a setting the chosen dataset or model lacks no longer enters the hash: as the file without it did then
    expected = VARIANTS[tuple(variant["hashes_as"])] if "changed_by_design" in variant else variant
    assert config_hash(scenario) != variant["hash"] or expected is variant
    assert (config_hash(scenario), baseline_hash(scenario)) == (expected["hash"], expected["baseline"])
    reference = reference_scenario(scenario)
    assert (None if reference is None else {"name": reference.run.name, "strategy": reference.strategy.name,
                                            "hash": config_hash(reference)}) == expected["reference"]


RUNS = json.loads((DATA / "run-dirs" / "hashes.json").read_text())["runs"]


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_config_json_written_before_reads_and_hashes_as_its_summary_says(name):
    text = (DATA / "run-dirs" / name / "config.json").read_text()
    if WRITTEN_WITH in text and json.loads(text)["data"]["name"] == "vehicle":
        if not HAVE_VEHICLE:
            pytest.skip(f"vehicle data not found (set {VEHICLE_DATA_ENV})")
        text = text.replace(WRITTEN_WITH, str(Path(VEHICLE).resolve()))
    scenario = Scenario.from_json(text)
    expected = RUNS[name]
    assert (config_hash(scenario), baseline_hash(scenario)) == (expected["config_hash"], expected["reference_hash"])
    assert {"name": scenario.strategy.name, **scenario.strategy_params()} == expected["strategy"]
    # read back from its own dump, it is the same scenario
    assert Scenario.from_json(scenario.to_json()) == scenario


def test_the_old_reference_string_reads_as_a_one_element_list():
    old = json.loads((DATA / "run-dirs" / "default" / "config.json").read_text())
    assert old["run"]["reference"] == "fedavg"
    assert Scenario.model_validate(old).run.reference == ["fedavg"]
    assert Scenario.model_validate(json.loads((DATA / "run-dirs" / "qffl-sum" / "config.json").read_text())
                                   ).run.reference == []  # "none"


FINGERPRINTS = json.loads((DATA / "fingerprints.json").read_text())


@pytest.mark.parametrize("entry", FINGERPRINTS["datasets"], ids=lambda e: f"{e['name']}-{sorted(e['kwargs'].items())}")
def test_build_dataset_generates_the_same_bits_as_before(entry):
    kwargs = dict(entry["kwargs"])
    if entry["name"] == "vehicle":
        if not HAVE_VEHICLE:
            pytest.skip(f"vehicle data not found (set {VEHICLE_DATA_ENV})")
        kwargs["path"] = VEHICLE
    dataset = build_dataset(entry["name"], **kwargs)
    digest = hashlib.sha256(json.dumps({k: v for k, v in dataset.metadata.items() if k != "path"}, sort_keys=True,
                                       default=str).encode())
    for k in range(dataset.num_devices):
        device = dataset.device(k)
        for a in (device.x_train, device.y_train, device.x_val, device.y_val, device.x_test, device.y_test):
            digest.update(str(a.dtype).encode())
            digest.update(str(a.shape).encode())
            digest.update(np.ascontiguousarray(a).tobytes())
    assert digest.hexdigest() == entry["sha256"]


@pytest.mark.parametrize("entry", FINGERPRINTS["models"], ids=lambda e: f"{e['name']}-{e['seed']}")
def test_build_model_initialises_the_same_bits_as_before(entry):
    weights = get_weights(build_model(entry["name"], entry["num_features"], entry["num_classes"], seed=entry["seed"],
                                      **entry["settings"]))
    digest = hashlib.sha256()
    for key, value in weights.items():
        digest.update(key.encode())
        digest.update(value.tobytes())
    assert digest.hexdigest() == entry["sha256"]
