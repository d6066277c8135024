"""term-fl's strategies import, construct and aggregate with Flower's private modules unavailable.

Each case runs in a fresh Python process that first imports Flower's public
packages (which themselves import some of these modules), then makes every
private module that term-fl touches unimportable (``sys.modules[name] =
None``, the attribute dropped from its package), optionally presents itself
as the nightly of Flower's next version, and only then imports term-fl:
every strategy of the registry is built from a scenario and aggregates one
round of the same mock replies. The aggregated models must equal those of a
process where nothing is blocked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

PRIVATE = (
    "flwr.supercore.run",
    "flwr.supercore.date",
    "flwr.supercore.task_identity",
    "flwr.common.constant",
    "flwr.app.metadata",
    "flwr.server.superlink.fleet.vce",
    "flwr.server.superlink.fleet.vce.vce_api",
    "flwr.server.superlink.fleet.vce.backend",
    "flwr.server.superlink.fleet.vce.backend.raybackend",
)

SCRIPT = r'''
import importlib, json, sys
import numpy as np
import flwr, flwr.app, flwr.serverapp, flwr.serverapp.strategy, flwr.clientapp  # Flower's public API first

blocked, version = json.loads(sys.argv[1]), sys.argv[2]
for name in blocked:
    parent, _, leaf = name.rpartition(".")
    sys.modules[name] = None  # `import name` raises ModuleNotFoundError from now on
    if parent in sys.modules and hasattr(sys.modules[parent], leaf):
        delattr(sys.modules[parent], leaf)  # ... and so does `from parent import leaf`
if version:
    flwr.__version__ = version

from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
from unittest.mock import Mock

from term_fl.config import load_scenario
from term_fl.federation.loop import build_scenario_strategy
from term_fl.flower_internals import fast_paths
from term_fl.strategies import STRATEGIES

def reply(node, pid, loss, seed):
    rng = np.random.default_rng(seed)
    arrays = ArrayRecord({"w": Array(rng.normal(size=(3, 4)).astype(np.float32)),
                          "b": Array(rng.normal(size=3).astype(np.float32))})
    metrics = MetricRecord({"num-examples": 10 + pid, "partition-id": pid, "train_loss_before": loss,
                            "train_loss_before_sum": loss * (10 + pid)})
    message = Mock(spec=Message)  # Flower's own strategy tests' mock reply
    message.content = RecordDict({"arrays": arrays, "metrics": metrics})
    message.has_error.side_effect = lambda: False
    message.has_content.side_effect = lambda: True
    message.metadata.src_node_id = node
    return message

out = {"fast": fast_paths(), "models": {}}
for name in STRATEGIES:
    tuned = {"term": ["strategy.t=1"], "qffl": ["strategy.q=1"]}.get(name, [])  # each strategy its own keys
    scenario = load_scenario(None, ["data.num_devices=6", "run.clients_per_round=3", "run.reference=none",
                                    f"strategy.name={name}", *tuned], environ={})
    strategy = build_scenario_strategy(scenario, 6)
    strategy.set_node_partitions({10 + p: p for p in range(6)})  # as discovery does (AFL needs it)
    rng = np.random.default_rng(0)
    strategy.current_arrays = ArrayRecord({"w": Array(rng.normal(size=(3, 4)).astype(np.float32)),
                                           "b": Array(rng.normal(size=3).astype(np.float32))})
    arrays, _ = strategy.aggregate_train(1, [reply(10 + p, p, 0.5 + p, p) for p in range(3)])
    out["models"][name] = {k: v.numpy().tolist() for k, v in arrays.items()}
out["still_blocked"] = all(sys.modules.get(name, None) is None for name in blocked)
out["flower_internals"] = sorted(m for m in sys.modules if m.startswith("term_fl.flower_internals"))
print(json.dumps(out))
'''


def run_case(blocked: tuple[str, ...], version: str = "") -> dict:
    done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(list(blocked)), version], cwd=REPO,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def unblocked() -> dict:
    return run_case(())


CASES = [
    pytest.param(PRIVATE, "", id="all-flwr-1.42"),
    pytest.param(PRIVATE, "1.43.0.dev20261130", id="all-next-nightly"),
    *(pytest.param((name,), "", id=f"{name}-flwr-1.42", marks=pytest.mark.slow) for name in PRIVATE),
]


@pytest.mark.parametrize("blocked, version", CASES)
def test_strategies_import_construct_and_aggregate_without_flowers_private_modules(blocked, version, unblocked):
    got = run_case(blocked, version)
    assert got["still_blocked"]  # nothing re-imported them
    assert got["fast"] is (version == "")  # the nightly takes Flower's public paths
    assert set(got["models"]) == set(unblocked["models"]) and got["models"]
    assert got["models"] == unblocked["models"]  # the same numbers
    # what the strategies load of term_fl.flower_internals: the gate, the codec, the records, the DP-wrapper check
    # (Flower's public names only); no patch module
    assert set(got["flower_internals"]) <= {"term_fl.flower_internals", "term_fl.flower_internals.gate",
                                            "term_fl.flower_internals.codec", "term_fl.flower_internals.records",
                                            "term_fl.flower_internals.dp_wrappers"}


def test_the_inprocess_engine_names_the_missing_identity_in_one_error():
    """Without Flower's TaskIdentity the in-process engine cannot act as a ServerApp: one error says so."""
    script = r'''
import sys
import flwr.app, flwr.serverapp, flwr.clientapp
sys.modules["flwr.supercore.task_identity"] = None
from term_fl.clientapp.app import app
from term_fl.engines.inprocess import InProcessGrid
from term_fl.flower_internals import FlowerInternalsError
try:
    with InProcessGrid(app, 2):
        pass
except FlowerInternalsError as exc:
    print(exc)
'''
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "has no flwr.supercore.task_identity.TaskIdentity, which term-fl's in-process engine" in done.stdout
