"""term_fl.flower_internals: fast paths only on the Flower they were written for, Flower's public API elsewhere."""

from __future__ import annotations

import logging

import flwr
import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from term_fl import flower_internals as internals


def test_the_installed_flower_is_the_one_the_internals_were_written_for():
    """Fails on purpose after a Flower upgrade: check every function of term_fl/flower_internals.py
    against the new version (the dispatcher, the Ray backend patches, the codec), then update SUPPORTED."""
    assert flwr.__version__.startswith(internals.SUPPORTED), (
        f"Flower {flwr.__version__} is installed; term_fl/flower_internals.py was written for "
        f"{internals.SUPPORTED}x and takes Flower's public (slower) paths on this version"
    )
    assert internals.fast_paths()


def content() -> RecordDict:
    return RecordDict(
        {
            "m1": MetricRecord({"a": 1.0}),
            "arrays": ArrayRecord({"w": Array(np.ones(2, dtype=np.float32))}),
            "config": ConfigRecord({"x": "y"}),
            "m2": MetricRecord({"b": 2}),
        }
    )


@pytest.fixture(params=["other-version", "turned-off"])
def plain_paths(request, monkeypatch):
    if request.param == "other-version":
        monkeypatch.setattr(flwr, "__version__", "9.0.0")
    else:
        monkeypatch.setenv(internals.ENV, "off")
    assert not internals.fast_paths()


def test_without_the_fast_paths_every_function_gives_flowers_own_result(plain_paths):
    from flwr.server.superlink.fleet.vce import vce_api
    from flwr.server.superlink.fleet.vce.backend import raybackend

    value = np.arange(12, dtype=np.float32).reshape(3, 4)
    array = internals.to_array(value)
    assert array.data == Array(value).data
    assert np.array_equal(internals.from_array(array), value)
    assert list(internals.from_array_record(internals.to_array_record({"v": value}))) == ["v"]
    record = content()
    assert internals.records_of(record, MetricRecord) == list(record.metric_records.values())
    assert internals.records_of(record, ArrayRecord) == list(record.array_records.values())
    original = vce_api.add_messages_to_queue
    with internals.linear_dispatcher() as on:
        assert not on and vce_api.add_messages_to_queue is original
    build = raybackend.RayBackend.build
    with internals.reusing_client_actors() as reuse:
        assert not reuse.enabled and raybackend.RayBackend.build is build
    register = vce_api._register_nodes
    with internals.simulation_node_table() as known:
        assert known is None and vce_api._register_nodes is register  # every node is asked


def test_another_flower_version_is_named_in_a_warning_once(monkeypatch, caplog):
    monkeypatch.setattr(flwr, "__version__", "9.1.0")
    monkeypatch.setattr(internals, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="term_fl"):
        internals.fast_paths()
        internals.fast_paths()
    assert caplog.text.count("this is Flower 9.1.0") == 1
