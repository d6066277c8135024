"""The linear dispatcher hands out what Flower 1.42's does: one undelivered message per node per poll."""

from __future__ import annotations

import threading
from queue import Queue
from types import SimpleNamespace

import pytest

from term_fl import flower_internals as dispatch


class FakeState:
    """The parts of Flower's InMemoryLinkState the dispatcher reads."""

    def __init__(self, messages):
        self.lock = threading.RLock()
        self.message_ins_store = {m.metadata.message_id: m for m in messages}
        self.checked = []

    def _check_stored_messages(self, ids):
        self.checked.append(set(ids))


def message(mid, node, delivered=""):
    return SimpleNamespace(metadata=SimpleNamespace(message_id=mid, dst_node_id=node, delivered_at=delivered))


def one_poll(state, nodes):
    queue, stop = Queue(), threading.Event()

    def stop_after_first_wait(timeout):
        stop.set()
        return True

    stop.wait = stop_after_first_wait  # run the loop body exactly once
    dispatch.add_messages_to_queue(state, queue, nodes, stop)
    return [queue.get_nowait().metadata.message_id for _ in range(queue.qsize())]


def test_one_message_per_node_per_poll_in_store_order_and_marked_delivered():
    msgs = [message("a", 1), message("b", 1), message("c", 2), message("d", 3, delivered="x"), message("e", 9)]
    state = FakeState(msgs)
    assert one_poll(state, {1: 0, 2: 1, 3: 2}) == ["a", "c"]  # b waits; d delivered; node 9 unknown
    assert msgs[0].metadata.delivered_at and msgs[2].metadata.delivered_at and not msgs[1].metadata.delivered_at
    assert state.checked == [{"a", "b", "c"}]  # Flower's own checks run on the candidates
    assert one_poll(state, {1: 0, 2: 1, 3: 2}) == ["b"]


def test_off_unless_asked_for_then_installed_only_inside_the_block(monkeypatch):
    from flwr.server.superlink.fleet.vce import vce_api

    original = vce_api.add_messages_to_queue
    with dispatch.linear_dispatcher() as on:  # the default: Flower's own dispatcher
        assert not on and vce_api.add_messages_to_queue is original
    with dispatch.override(patches=["dispatcher"]), dispatch.linear_dispatcher() as on:
        assert on and vce_api.add_messages_to_queue is dispatch.add_messages_to_queue
        with dispatch.linear_dispatcher() as nested:
            assert nested
        assert vce_api.add_messages_to_queue is dispatch.add_messages_to_queue
    assert vce_api.add_messages_to_queue is original


@pytest.mark.parametrize("env, on", [
    ({"TERM_FL_FLOWER_PATCHES": "dispatcher"}, True),
    ({"TERM_FL_FLOWER_PATCHES": "all"}, True),
    ({"TERM_FL_FLOWER_PATCHES": "node-table,actor-reuse"}, False),
    ({"TERM_FL_DISPATCHER": "linear"}, True),  # term-fl 0.2's variable asks for it too
    ({"TERM_FL_FLOWER_PATCHES": "all", "TERM_FL_DISPATCHER": "flower"}, False),  # ... or turns it off
    ({"TERM_FL_FLOWER_PATCHES": "all", "TERM_FL_FLOWER_INTERNALS": "off"}, False),
])
def test_the_environment_asks_for_the_dispatcher(monkeypatch, env, on):
    from flwr.server.superlink.fleet.vce import vce_api

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    dispatch.reload()
    with dispatch.linear_dispatcher() as installed:
        assert installed is on and (vce_api.add_messages_to_queue is dispatch.add_messages_to_queue) is on


@pytest.mark.parametrize("version", ["1.43.0", "2.0.0"])
def test_not_installed_for_other_flower_versions(monkeypatch, version):
    import flwr

    monkeypatch.setenv("TERM_FL_FLOWER_PATCHES", "all")
    monkeypatch.setattr(flwr, "__version__", version)
    dispatch.reload()
    assert not dispatch.dispatcher_wanted()


def test_the_engine_node_table_is_the_one_flower_registers(monkeypatch):
    """simulation_node_table records what vce_api._register_nodes returns, only while the block runs."""
    from flwr.server.superlink.fleet.vce import vce_api

    monkeypatch.setattr(vce_api, "_register_nodes", lambda num_nodes, state_factory: {11: 0, 22: 1, 33: 2})
    patched = vce_api._register_nodes
    with dispatch.override(patches="node-table"), dispatch.simulation_node_table() as known:
        assert known(0.01) is None  # nodes not registered yet
        assert vce_api._register_nodes(3, None) == {11: 0, 22: 1, 33: 2}
        assert known(0.01) == {11: 0, 22: 1, 33: 2}
    assert vce_api._register_nodes is patched


@pytest.mark.parametrize("env, version", [
    ({}, None),  # the default: every node is asked
    ({"TERM_FL_FLOWER_PATCHES": "all", "TERM_FL_DISCOVERY": "query"}, None),
    ({"TERM_FL_FLOWER_PATCHES": "node-table"}, "1.43.0"),
])
def test_no_engine_node_table_by_default_on_request_or_on_another_flower(env, version, monkeypatch):
    import flwr

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    if version:
        monkeypatch.setattr(flwr, "__version__", version)
    dispatch.reload()
    with dispatch.simulation_node_table() as known:
        assert known is None
