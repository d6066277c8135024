"""term_fl.flower_internals: fast paths only on the Flower they were written for, Flower's public API elsewhere.

The version gate's settings (read once), the opt-in patches, the required
internals and their scopes are in tests/test_flower_gate.py; importing and
using the strategies with Flower's private modules blocked in
tests/test_flower_blocked.py.
"""

from __future__ import annotations

import logging
import time

import flwr
import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict

from term_fl import flower_internals as internals


def test_the_installed_flower_is_the_one_the_internals_were_written_for():
    """Fails on purpose after a Flower upgrade: check every module of term_fl/flower_internals/ against the
    new version (the codec, the records, the identity, the dispatcher, the node table, the Ray backend
    patches), then update gate.SUPPORTED."""
    assert flwr.__version__.startswith(internals.SUPPORTED), (
        f"Flower {flwr.__version__} is installed; term_fl/flower_internals/ was written for "
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
    monkeypatch.setenv(internals.PATCHES_ENV, "all")  # asked for, but the fast paths are off
    if request.param == "other-version":
        monkeypatch.setattr(flwr, "__version__", "9.0.0")
    else:
        monkeypatch.setenv(internals.INTERNALS_ENV, "off")
    internals.reload()
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
    req = request()
    reply = internals.reply_message(req, {"metrics": MetricRecord({"a": 1})})
    _same_reply(reply, Message(RecordDict({"metrics": MetricRecord({"a": 1})}), reply_to=req))
    # the required internals work on every version, their writes checked through Flower's getters
    internals.set_message_id(req, "new-id")
    assert req.metadata.message_id == "new-id"
    with internals.serverapp_identity(run_id=99):
        built = Message(RecordDict({}), dst_node_id=5, message_type=MessageType.QUERY)
    assert (built.metadata.run_id, built.metadata.src_node_id) == (99, 1)


def request() -> Message:
    """A train message as a SuperLink delivers it to a node (an id, a source, a TTL)."""
    from flwr.app.metadata import Metadata

    metadata = Metadata(run_id=7, message_id="abc123", src_node_id=1, dst_node_id=42, reply_to_message_id="",
                        group_id="3", created_at=time.time() - 5.0, ttl=3600.0, message_type=MessageType.TRAIN,
                        src_task_id=11, dst_task_id=None)
    return Message(RecordDict({"config": ConfigRecord({"x": 1})}), metadata=metadata)


def _same_reply(fast: Message, plain: Message) -> None:
    """Every attribute of the two replies (message, metadata, content) is the same, but the time they were built."""
    assert type(fast) is Message and list(fast.__dict__) == list(plain.__dict__)
    a, b = fast.metadata.__dict__, plain.metadata.__dict__
    assert list(a) == list(b)
    assert {k: v for k, v in a.items() if k not in ("_created_at", "_ttl")} == {
        k: v for k, v in b.items() if k not in ("_created_at", "_ttl")}
    # both end when the request does
    assert a["_created_at"] + a["_ttl"] == pytest.approx(b["_created_at"] + b["_ttl"], abs=1e-6)
    assert abs(a["_created_at"] - b["_created_at"]) < 60
    assert not fast.has_error() and not plain.has_error() and fast.has_content()
    assert list(fast.content.__dict__) == list(plain.content.__dict__)
    assert fast.content.deflate() == plain.content.deflate() and fast.content.object_id == plain.content.object_id


def test_a_fast_reply_is_the_reply_flower_builds():
    """reply_message: the metadata of Flower's reply branch (nodes and tasks swapped, the request's run, group and
    type, its id as reply_to, a TTL ending with the request's), the same content; bad records get Flower's error."""
    assert internals.fast_paths()
    arrays = internals.to_array_record({"w": np.ones(3, dtype=np.float32)})
    metrics = internals.metric_record({"partition-id": 3, "train_loss": 0.5})
    req = request()
    fast = internals.reply_message(req, {"arrays": arrays, "metrics": metrics})
    _same_reply(fast, Message(RecordDict({"arrays": arrays, "metrics": metrics}), reply_to=req))
    meta = fast.metadata
    assert (meta.src_node_id, meta.dst_node_id, meta.src_task_id, meta.dst_task_id) == (42, 1, None, 11)
    assert (meta.run_id, meta.reply_to_message_id, meta.group_id, meta.message_type) == (7, "abc123", "3", "train")
    assert meta.message_id == "" and meta.delivered_at == "" and 3590.0 < meta.ttl < 3595.1
    assert list(fast.content) == ["arrays", "metrics"] and fast.content["metrics"] is metrics
    fast.content["later"] = ConfigRecord({"y": 2})  # a RecordDict as any other: later items are checked
    with pytest.raises(TypeError):
        fast.content["bad"] = {"a": 1}
    with pytest.raises(TypeError):  # not a record: Flower's constructor and its error
        internals.reply_message(req, {"metrics": {"a": 1}})


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


def test_arrays_of_every_dtype_get_flowers_bytes_also_after_another_dtype_of_the_same_size():
    """to_array caches headers and dtype names: two structured dtypes of one size ('|V8' both) or byte orders
    must not share them; every array's bytes and dtype are Array(value)'s, and from_array gives it back."""
    values = [
        np.zeros(3, dtype=[("a", "<f4"), ("b", "<f4")]),
        np.ones(3, dtype=[("x", "<i4"), ("y", "<f4")]),
        np.arange(4, dtype="<f8"),
        np.arange(4, dtype=">f8"),
        np.arange(6, dtype=np.float32).reshape(2, 3),
        np.arange(6, dtype=np.int64).reshape(3, 2),
    ]
    for _ in range(2):  # the second time from the caches
        for value in values:
            fast, plain = internals.to_array(value), Array(value)
            assert (fast.dtype, fast.shape, fast.data) == (plain.dtype, plain.shape, plain.data)
            back = internals.from_array(fast)
            assert back.dtype == value.dtype and np.array_equal(back, value)


def test_another_flower_version_is_named_in_a_warning_once(monkeypatch, caplog):
    from term_fl.flower_internals import gate

    monkeypatch.setattr(flwr, "__version__", "9.1.0")
    monkeypatch.setattr(gate, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="term_fl"):
        internals.reload()
        internals.fast_paths()
        internals.reload()
    assert caplog.text.count("this is Flower 9.1.0") == 1
