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
    metrics = internals.metric_record({"a": 1, "b": 0.5})
    assert metrics == MetricRecord({"a": 1, "b": 0.5}) and metrics.deflate() == MetricRecord({"a": 1, "b": 0.5}).deflate()
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


def test_fast_records_are_flowers_records_byte_for_byte():
    """What the fast constructors build deflates to the same bytes (and object id) as Flower's constructors,
    and behaves the same afterwards (items added later are checked, marked dirty)."""
    assert internals.fast_paths()
    values = {"num-examples": 12, "partition-id": 3, "train_loss": 0.25, "val_accuracy": 1.0}
    fast, plain = internals.metric_record(values), MetricRecord(values)
    assert fast == plain and fast.deflate() == plain.deflate() and fast.object_id == plain.object_id
    fast["later"] = 2.0
    assert fast["later"] == 2.0 and "later" not in values  # a copy: the input stays as it was
    with pytest.raises(TypeError):
        fast["bad"] = {"a": 1}
    arrays = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.zeros(2, dtype=np.float32)}
    fast_arrays = internals.to_array_record(arrays)
    plain_arrays = ArrayRecord({k: Array(v) for k, v in arrays.items()})
    assert fast_arrays.is_dirty and all(a.is_dirty for a in fast_arrays.values())  # as a new record is
    assert list(fast_arrays) == ["w", "b"] and fast_arrays.deflate() == plain_arrays.deflate()
    assert fast_arrays.object_id == plain_arrays.object_id
    for key, array in fast_arrays.items():
        other = plain_arrays[key]
        assert (array.dtype, array.shape, array.stype, array.data) == (other.dtype, other.shape, other.stype, other.data)
        assert array.object_id == other.object_id
    # not a plain int or float (numpy scalars, booleans, lists): Flower's checked constructor decides
    assert internals.metric_record({"x": np.float64(0.5)}) == MetricRecord({"x": np.float64(0.5)})
    with pytest.raises(TypeError):
        internals.metric_record({"x": "text"})


def test_another_flower_version_is_named_in_a_warning_once(monkeypatch, caplog):
    monkeypatch.setattr(flwr, "__version__", "9.1.0")
    monkeypatch.setattr(internals, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="term_fl"):
        internals.fast_paths()
        internals.fast_paths()
    assert caplog.text.count("this is Flower 9.1.0") == 1
