"""Shared fixtures: small scenarios, a quiet environment for Flower and Ray."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

from term_fl.config import Scenario, load_scenario

REPO = Path(__file__).resolve().parents[1]
SHARED_VEHICLE = REPO.parent / "shared" / "data" / "vehicle" / "vehicle_fewshot.json"

# Property tests check properties, not speed (speed is the benchmarks' job): no per-example
# deadline, which a loaded 2-core CI machine broke (DeadlineExceeded in tests/test_tilting.py).
settings.register_profile("term-fl", deadline=None)
settings.load_profile("term-fl")

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")


def vehicle_path() -> Path | None:
    """The real vehicle data: $TERM_FL_VEHICLE_DATA, else ../shared beside the repo, else None."""
    env = os.environ.get("TERM_FL_VEHICLE_DATA")
    for candidate in (Path(env) if env else None, SHARED_VEHICLE):
        if candidate is not None and candidate.is_file():
            return candidate
    return None


SMALL = [
    # sub-table keys: defaults of the synthetic data and of TERM, harmless where a test chooses another
    "data.synthetic.num_devices=6",
    "data.synthetic.max_samples=60",
    "data.train_fraction=0.6",
    "data.val_fraction=0.2",
    "data.test_fraction=0.2",
    "run.rounds=3",
    "run.clients_per_round=3",
    "client.batch_size=16",
    # the embedded default runs TERM and a FedAvg reference, batched, evaluated every 10th round:
    # the tests' tiny runs are one run, sequential, evaluated every round
    "run.reference=none",
    "run.executor=sequential",
    "run.evaluate_every=1",
    "strategy.term.t=1",
]


def small_scenario(*overrides: str) -> Scenario:
    """A tiny Synthetic(1, 1) scenario: 6 devices, 3 per round, 3 rounds."""
    return load_scenario(None, [*SMALL, *overrides], environ={})


@pytest.fixture
def tiny() -> Scenario:
    return small_scenario("run.engine=inprocess")


@pytest.fixture(autouse=True)
def _flower_home(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("FLWR_HOME", str(tmp_path_factory.mktemp("flwr-home")))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After each test and its fixtures (monkeypatch undone), the settings of term_fl.flower_internals that the
    environment asks for: they are read once (term_fl.flower_internals.gate), and a test that changes the
    environment or Flower's version calls ``gate.reload()`` itself."""
    yield
    from term_fl.flower_internals import gate

    gate.reload()
