"""The version gate of term_fl.flower_internals: settings read once, opt-in patches, required internals, scopes.

Also the process-wide state an in-process run touches (torch's thread count,
the garbage collector, Flower's task identity, the environment): the same
after the run as before it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, MutableMapping

import flwr
import pytest
import torch
from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from conftest import small_scenario
from process_state import identity, process_state
from stored_results import assert_same_stored, stored
from term_fl.common.errors import ConfigError
from term_fl.engines import run_scenario
from term_fl.flower_internals import gate
from term_fl.results import ResultsStore
from term_fl.runs.run import run_one

VERSION = "1.42.0"
ALL = frozenset(gate.PATCHES)


# --- reading the settings ------------------------------------------------------------------


@pytest.mark.parametrize("environ, fast, patches", [
    ({}, True, frozenset()),  # the default: fast paths on, no patch of the Simulation Engine
    ({"TERM_FL_FLOWER_PATCHES": "all"}, True, ALL),
    ({"TERM_FL_FLOWER_PATCHES": "none"}, True, frozenset()),
    ({"TERM_FL_FLOWER_PATCHES": " dispatcher , actor-reuse "}, True, {"dispatcher", "actor-reuse"}),
    ({"TERM_FL_DISPATCHER": "linear", "TERM_FL_DISCOVERY": "engine"}, True, {"dispatcher", "node-table"}),
    ({"TERM_FL_FLOWER_PATCHES": "all", "TERM_FL_DISPATCHER": "flower", "TERM_FL_DISCOVERY": "query"}, True,
     {"actor-reuse"}),
    ({"TERM_FL_FLOWER_INTERNALS": "off", "TERM_FL_FLOWER_PATCHES": "all"}, False, ALL),
])
def test_the_environment_gives_the_settings(environ, fast, patches):
    settings = gate.read_settings(environ, VERSION)
    assert (settings.fast, settings.patches, settings.flower_version) == (fast, frozenset(patches), VERSION)


def test_another_flower_gets_no_fast_path_whatever_is_asked_for():
    settings = gate.read_settings({"TERM_FL_FLOWER_PATCHES": "all"}, "1.43.0.dev20261130")
    assert not settings.fast and settings.patches == ALL  # asked for, never installed (patch_on needs fast)


@pytest.mark.parametrize("environ, names", [
    ({"TERM_FL_FLOWER_PATCHES": "dispatcher,turbo"}, ["TERM_FL_FLOWER_PATCHES", "'turbo'", "node-table"]),
    ({"TERM_FL_FLOWER_INTERNALS": "0"}, ["TERM_FL_FLOWER_INTERNALS='0'", "'on'", "'off'"]),
    ({"TERM_FL_DISPATCHER": "fast"}, ["TERM_FL_DISPATCHER='fast'", "'linear'", "'flower'"]),
    ({"TERM_FL_DISCOVERY": "ask"}, ["TERM_FL_DISCOVERY='ask'", "'engine'", "'query'"]),
])
def test_a_bad_value_names_the_variable_and_what_is_allowed(environ, names):
    with pytest.raises(ConfigError) as info:
        gate.read_settings(environ, VERSION)
    assert all(name in str(info.value) for name in names), str(info.value)


class CountingEnviron(MutableMapping):
    """os.environ that counts how often each of the gate's variables is read."""

    WATCHED = (gate.INTERNALS_ENV, gate.PATCHES_ENV, gate.DISPATCHER_ENV, gate.DISCOVERY_ENV)

    def __init__(self, data: dict[str, str]) -> None:
        self.data, self.reads = data, dict.fromkeys(self.WATCHED, 0)

    def __getitem__(self, key: str) -> str:
        if key in self.reads:
            self.reads[key] += 1
        return self.data[key]

    def __setitem__(self, key: str, value: str) -> None:
        self.data[key] = value

    def __delitem__(self, key: str) -> None:
        del self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


@pytest.mark.parametrize("executor", ["sequential", "cohort"])
def test_a_run_reads_the_settings_once_not_per_message(monkeypatch, executor):
    """A 3-round run of 6 devices (thousands of codec calls) reads each variable once: when the run starts."""
    environ = CountingEnviron(dict(os.environ))
    monkeypatch.setattr(os, "environ", environ)
    run_scenario(small_scenario("run.engine=inprocess", f"run.executor={executor}"))
    assert environ.reads == dict.fromkeys(CountingEnviron.WATCHED, 1)


def test_settings_hold_until_reloaded_and_a_run_reloads_them(monkeypatch):
    assert gate.fast_paths()
    monkeypatch.setenv(gate.INTERNALS_ENV, "off")
    assert gate.fast_paths()  # read once: the environment is not asked again
    assert not gate.reload().fast and not gate.fast_paths()
    monkeypatch.setenv(gate.INTERNALS_ENV, "on")
    run_scenario(small_scenario("run.engine=inprocess", "run.rounds=1"))
    assert gate.fast_paths()


def test_override_changes_the_settings_for_a_block_also_across_a_reload():
    before = gate.settings()
    with gate.override(patches="all") as outer:
        assert outer.patches == ALL and gate.patch_on("actor-reuse")
        with gate.override(fast=False, patches=["node-table"]):
            assert not gate.fast_paths() and not gate.patch_on("node-table")
            assert gate.reload().patches == {"node-table"}  # a run starting inside the block keeps it
        assert gate.settings() == outer
        with pytest.raises(RuntimeError), gate.override(patches="none"):
            raise RuntimeError("boom")
        assert gate.settings() == outer
    assert gate.settings() == before
    with pytest.raises(ConfigError, match="override"), gate.override(patches="dispatch"):
        pass
    with pytest.raises(ValueError, match="unknown patch 'dispatch'"):
        gate.patch_on("dispatch")


def test_override_cannot_turn_the_fast_paths_on_for_another_flower(monkeypatch):
    monkeypatch.setattr(flwr, "__version__", "1.43.0")
    gate.reload()
    with gate.override(fast=True, patches="all"):
        assert not gate.fast_paths() and not gate.patch_on("dispatcher")


# --- private and required names -------------------------------------------------------------


def test_a_private_module_is_imported_only_with_the_fast_paths_and_a_missing_one_is_named(monkeypatch, caplog):
    name = "flwr.server.superlink.fleet.vce.vce_api"
    with gate.override(fast=False):
        assert gate.private(name) is None
    assert gate.private(name) is sys.modules[name]
    assert gate.private(name, "add_messages_to_queue") is sys.modules[name].add_messages_to_queue
    monkeypatch.setitem(sys.modules, "flwr.supercore.not_there", None)
    with caplog.at_level("WARNING", logger="term_fl"):
        assert gate.private("flwr.supercore.not_there") is None
        assert gate.private(name, "no_such_function") is None
    assert "has no flwr.supercore.not_there" in caplog.text and f"has no {name}.no_such_function" in caplog.text


def test_a_required_name_is_used_on_any_version_and_a_missing_one_stops_with_one_error(monkeypatch):
    monkeypatch.setattr(flwr, "__version__", "1.43.0")
    gate.reload()
    assert gate.required("flwr.supercore.task_identity", "TaskIdentity", "x") is TaskIdentity
    monkeypatch.setitem(sys.modules, "flwr.supercore.task_identity", None)
    gate.reload()  # forget what was imported
    with pytest.raises(gate.FlowerInternalsError) as info:
        gate.required("flwr.supercore.task_identity", "TaskIdentity", "the in-process engine")
    message = str(info.value)
    assert "Flower 1.43.0 has no flwr.supercore.task_identity.TaskIdentity" in message
    assert "the in-process engine needs" in message and "flwr==1.42.0" in message


# --- the identity of the in-process engine and the process's state ---------------------------


def test_the_serverapp_identity_holds_inside_the_block_and_the_one_of_before_comes_back():
    from term_fl.flower_internals import serverapp_identity

    before = identity()
    with serverapp_identity(run_id=5):
        assert identity() == (1, 5, 1)
        with serverapp_identity(run_id=6):
            msg = Message(RecordDict({}), dst_node_id=3, message_type=MessageType.QUERY)
            assert (msg.metadata.run_id, msg.metadata.src_node_id) == (6, 1)
        assert identity() == (1, 5, 1)
        with pytest.raises(KeyError), serverapp_identity(run_id=7):
            raise KeyError("boom")
        assert identity() == (1, 5, 1)
    assert identity() == before


def test_an_inprocess_grid_works_only_inside_its_block_and_gives_the_identity_back():
    from term_fl.clientapp.app import app
    from term_fl.engines.inprocess import InProcessGrid

    grid = InProcessGrid(app, 2, node_ids=[1, 2])
    before = identity()
    with pytest.raises(RuntimeError, match="outside its with-block"):
        grid.get_node_ids()
    with grid:
        assert identity()[1] == grid.run.run_id and grid.get_node_ids() == [1, 2]
        (reply,) = grid.send_and_receive([grid.create_message(RecordDict({"config": ConfigRecord({})}),
                                                              MessageType.QUERY, 2, "1")])
        assert reply.content["metrics"]["partition-id"] == 1
        with pytest.raises(RuntimeError, match="already open"):
            grid.__enter__()
    assert identity() == before
    with pytest.raises(RuntimeError, match="outside its with-block"):
        grid.push_messages([])


@pytest.fixture
def three_threads():
    """torch on 3 threads around the test (a caller's setting that a run must leave alone)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(3)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("executor", ["sequential", "cohort"])
def test_an_inprocess_run_leaves_the_process_as_it_found_it(executor, monkeypatch, tmp_path, three_threads):
    """Clients still train on one thread (each train message checked), and afterwards the caller's thread
    count, garbage collector, Flower's task identity, the environment and Flower's modules are as before."""
    from term_fl.clientapp import app as client_app_module
    from term_fl.engines import cohort_executor

    seen: list[int] = []

    def spy(module, name):
        original = getattr(module, name)

        def counted(*args, **kwargs):
            seen.append(torch.get_num_threads())
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)

    spy(client_app_module, "train_tensors")
    spy(cohort_executor, "train_cohort")
    before = process_state()
    run_one(small_scenario("run.engine=inprocess", f"run.executor={executor}"), ResultsStore(tmp_path / "r.db"),
            out_dir=tmp_path / "run")
    assert process_state() == before and torch.get_num_threads() == 3
    assert seen and set(seen) == {1}


def test_the_clientapp_trains_on_one_thread_and_gives_the_callers_count_back(monkeypatch, three_threads):
    """A deployment's ClientApp process: torch's thread count is 1 while a message is answered, and back after."""
    from flwr.app import Context

    from term_fl.clientapp import app as client_app_module
    from term_fl.data import dataset_for
    from term_fl.flower_internals import serverapp_identity, to_array_record
    from term_fl.learning.models import get_weights, model_for

    seen: list[int] = []
    original = client_app_module.train_tensors
    monkeypatch.setattr(client_app_module, "train_tensors",
                        lambda *a, **k: seen.append(torch.get_num_threads()) or original(*a, **k))
    scenario = small_scenario()
    weights = get_weights(model_for(scenario, dataset_for(scenario)))
    with serverapp_identity(run_id=1):
        msg = Message(RecordDict({"arrays": to_array_record(weights),
                                  "config": ConfigRecord({"scenario": scenario.to_json(), "server-round": 1})}),
                      dst_node_id=1, message_type=MessageType.TRAIN)
    context = Context(run_id=1, node_id=1, node_config={"partition-id": 0, "num-partitions": 6},
                      state=RecordDict(), run_config={})
    reply = client_app_module.app(msg, context)
    assert not reply.has_error() and seen == [1] and torch.get_num_threads() == 3


def test_an_inprocess_run_stores_the_same_with_the_fast_paths_on_and_off(tmp_path):
    """The fast paths change the time, never a stored number (the codec, the records, the replies)."""
    store = ResultsStore(tmp_path / "r.db")
    scenario = small_scenario("run.engine=inprocess", "strategy.name=term", "strategy.t=2", "run.executor=cohort")
    results = {}
    for fast in (True, False):
        with gate.override(fast=fast):
            results[fast] = stored(store, run_one(scenario, store, out_dir=tmp_path / f"fast-{fast}").run_id)
    assert_same_stored(results[True], results[False])
