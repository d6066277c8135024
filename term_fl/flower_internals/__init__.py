"""Every use of Flower's internals, in one place, behind one version check.

term-fl's speed work reaches into Flower 1.42 where its public API costs too
much (each measured: benchmarks/README.md). All of it lives here:

- the Array codec (:func:`to_array`, :func:`from_array` and the record
  versions): byte-identical to Flower's ``Array(ndarray)`` / ``Array.numpy()``,
  without parsing the ``.npy`` header of every array;
- :func:`metric_record`: a client's MetricRecord without a Python check per
  item (the replies of a round of thousands of clients);
- :func:`records_of`: the records of one type in a RecordDict, without the
  synchronised typed views (``content.metric_records`` ...) Flower builds per call;
- :func:`set_message_id` and :func:`act_as_serverapp`: the in-process engine
  names the messages it delivers and gives its process the identity of a
  ServerApp (Flower's own grids and ServerApp runner write the same private
  fields: there is no public setter);
- :func:`linear_dispatcher`: replaces ``vce_api.add_messages_to_queue`` of the
  Simulation Engine, whose poll costs nodes x messages;
- :func:`reusing_client_actors`: patches ``RayBackend.build`` / ``terminate``
  and reads ``BasicActorPool._future_to_actor`` so that a sweep reuses the
  ClientApp actors of the previous simulation; :func:`kill_actors` ends them
  with ``ray.kill`` (Flower's own termination logs a warning per actor);
- :func:`simulation_node_table`: records the node -> partition table that
  ``vce_api._register_nodes`` builds, so that the server need not ask every
  virtual node which partition it holds.

They were written against Flower :data:`SUPPORTED`. On any other version
:func:`fast_paths` is False, a warning says so once, and every function here
takes its plain path through Flower's public API (slower, the same numbers);
``tests/test_flower_internals.py`` fails on purpose until someone checks them
against the new version. ``TERM_FL_FLOWER_INTERNALS=off`` forces the plain
paths (``TERM_FL_DISPATCHER=flower`` turns off the dispatcher alone,
``TERM_FL_DISCOVERY=query`` the node table alone).
"""

from __future__ import annotations

import io
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from queue import Queue
from typing import Any, TypeVar

import flwr
import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.app.metadata import Metadata
from flwr.supercore.date import now
from flwr.supercore.run import Run  # the Grid API's run (flwr.serverapp exports no type for it)

__all__ = [
    "DISPATCHER_ENV", "ENV", "SUPPORTED", "ActorReuse", "Run", "act_as_serverapp", "fast_paths", "from_array",
    "from_array_record", "linear_dispatcher", "records_of", "reusing_client_actors", "set_message_id", "to_array",
    "to_array_record",
]

SUPPORTED = "1.42."  # the Flower versions (prefix) these internals were checked against
ENV = "TERM_FL_FLOWER_INTERNALS"  # "off": plain public-API paths everywhere
DISPATCHER_ENV = "TERM_FL_DISPATCHER"  # "flower": keep Flower's dispatcher (the other fast paths stay)
DISCOVERY_ENV = "TERM_FL_DISCOVERY"  # "query": ask every node for its partition, as on a deployment

log = logging.getLogger("term_fl")
_warned: set[str] = set()


def fast_paths() -> bool:
    """Whether the installed Flower is the one these internals were written for, and they are not turned off."""
    if os.environ.get(ENV, "on") == "off":
        return False
    version = flwr.__version__
    if version.startswith(SUPPORTED):
        return True
    if version not in _warned:
        _warned.add(version)
        log.warning(
            "term-fl's fast paths into Flower's internals were written for Flower %sx, this is Flower %s: "
            "using Flower's public API instead (same numbers, slower). See term_fl/flower_internals.py.",
            SUPPORTED, version,
        )
    return False


# -- the Array codec -------------------------------------------------------------
#
# Flower stores an Array as the .npy bytes of the array (np.save(...,
# allow_pickle=False)) and decodes it with np.load, which parses the header
# (ast.literal_eval) every time. A federated round moves the same few shapes
# over and over: each (dtype, shape) header is built once with np.save, a
# C-contiguous array is encoded as header + array.tobytes() (exactly the bytes
# np.save writes) and data whose first bytes are that header are decoded with
# np.frombuffer. Anything else (another serialisation type, Fortran order,
# byte-swapped, object arrays, a truncated buffer) goes through Flower's own code.

NUMPY_STYPE = "numpy.ndarray"  # flwr's SType.NUMPY
_MAX_HEADERS = 1024
# Keyed by the dtype itself: dtype.str is the same for different structured dtypes of one size ('|V8').
_headers: dict[tuple[np.dtype, tuple[int, ...]], bytes] = {}
_dtype_names: dict[np.dtype, str] = {}


def _dtype_name(dtype: np.dtype) -> str:
    """``str(dtype)``, what an ``Array`` stores as its dtype, once per dtype (numpy builds it in Python)."""
    name = _dtype_names.get(dtype)
    if name is None:
        name = str(dtype)
        if len(_dtype_names) < _MAX_HEADERS:
            _dtype_names[dtype] = name
    return name


def _header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """The ``.npy`` header ``np.save`` writes for a C-ordered array of this dtype and shape."""
    key = (dtype, shape)
    header = _headers.get(key)
    if header is None:
        buffer = io.BytesIO()
        np.save(buffer, np.empty(shape, dtype=dtype), allow_pickle=False)
        data = buffer.getvalue()
        header = data[: len(data) - dtype.itemsize * math.prod(shape)]
        if len(_headers) >= _MAX_HEADERS:
            _headers.clear()
        _headers[key] = header
    return header


def to_array(value: np.ndarray, *, fast: bool | None = None) -> Array:
    """A Flower ``Array`` holding ``value`` (the bytes ``Array(value)`` would hold).

    The fast path also skips ``Array.__init__``'s argument dispatch and checks
    (its fields are set as that constructor sets them). ``fast``: the caller's
    :func:`fast_paths` (asked here when None).
    """
    value = np.asarray(value)
    if value.dtype.hasobject or not value.flags.c_contiguous or not (fast_paths() if fast is None else fast):
        return Array(value)
    shape, dtype = value.shape, value.dtype
    array = Array.__new__(Array)
    array.__dict__.update(
        dtype=_dtype_name(dtype), shape=shape, stype=NUMPY_STYPE, data=_header(dtype, shape) + value.tobytes()
    )
    return array


def from_array(array: Array) -> np.ndarray:
    """The numpy array an ``Array`` holds (a writable copy, like ``Array.numpy()``)."""
    if array.stype == NUMPY_STYPE and fast_paths():
        try:
            dtype = np.dtype(array.dtype)
        except TypeError:
            dtype = None
        if dtype is not None and not dtype.hasobject:
            shape = tuple(array.shape)
            header = _header(dtype, shape)
            data = array.data
            if len(data) == len(header) + dtype.itemsize * math.prod(shape) and data.startswith(header):
                return np.frombuffer(data, dtype=dtype, offset=len(header)).reshape(shape).copy()
    return array.numpy()


def to_array_record(arrays: Mapping[str, np.ndarray]) -> ArrayRecord:
    """An ``ArrayRecord`` of ``arrays`` (keys in order).

    Filled item by item: ``ArrayRecord(dict_of_arrays)`` would copy every
    ``Array`` once more; the fast path fills its dictionary directly (the keys
    are strings and the values Arrays, which is all its checks check).
    """
    record = ArrayRecord()
    if fast_paths():
        record.__dict__["_data"] = {str(key): to_array(value, fast=True) for key, value in arrays.items()}
        return record
    for key, value in arrays.items():
        record[key] = to_array(value)
    return record


def metric_record(values: Mapping[str, int | float]) -> MetricRecord:
    """A ``MetricRecord`` of the ints and floats a client computed.

    ``MetricRecord(values)`` checks every key and value in Python (a cost per
    reply that matters when a round answers thousands of messages); the fast
    path fills its dictionary directly, after one check that every value is a
    plain int or float (anything else takes Flower's checked constructor, and
    its error).
    """
    if fast_paths() and all(type(v) in (int, float) and type(k) is str for k, v in values.items()):
        record = MetricRecord()
        record.__dict__["_data"] = dict(values)
        return record
    return MetricRecord(dict(values))


def from_array_record(record: ArrayRecord) -> dict[str, np.ndarray]:
    """The arrays of a record as numpy (keys in order); the record is left intact (no ``gc.collect``)."""
    return {key: from_array(array) for key, array in record.items()}


# -- records and messages ----------------------------------------------------------

RecordT = TypeVar("RecordT", ArrayRecord, MetricRecord, ConfigRecord)
_TYPED_VIEWS = {ArrayRecord: "array_records", MetricRecord: "metric_records", ConfigRecord: "config_records"}


def records_of(content: RecordDict, kind: type[RecordT]) -> list[RecordT]:
    """The records of one type in a RecordDict, in order (what ``content.metric_records`` ... hold).

    The fast path reads the RecordDict's items instead of building Flower's
    synchronised typed view, a cost per call and per reply.
    """
    if fast_paths():
        return [record for record in content.values() if isinstance(record, kind)]
    return list(getattr(content, _TYPED_VIEWS[kind]).values())


def reply_message(reply_to: Message, records: Mapping[str, ArrayRecord | MetricRecord | ConfigRecord]) -> Message:
    """``Message(RecordDict(records), reply_to=reply_to)``: a client's reply, built as Flower builds it.

    Flower's constructors check every argument, key and value and validate the
    message type again (tens of microseconds per reply: a cost that matters
    when a round answers thousands of messages in one process, as the cohort
    executor does). The fast path sets the same attributes to the same values
    (the metadata of Flower's reply branch: source and destination swapped,
    the run, group and message type of ``reply_to``, a TTL that ends when
    ``reply_to``'s does) after one check that every key is a string and every
    value a record; anything else takes Flower's constructors, and their errors.
    """
    if not (fast_paths() and all(type(k) is str and type(v) in _RECORD_TYPES for k, v in records.items())):
        return Message(RecordDict(dict(records)), reply_to=reply_to)
    content = RecordDict()
    content.__dict__["_data"] = dict(records)
    request = reply_to.metadata
    current = now().timestamp()
    metadata = Metadata.__new__(Metadata)
    metadata.__dict__.update(
        _run_id=request.run_id,
        _message_id="",  # set by the SuperLink (or the Grid) when it stores the reply
        _src_node_id=request.dst_node_id,
        _dst_node_id=request.src_node_id,
        _src_task_id=request.dst_task_id,
        _dst_task_id=request.src_task_id,
        _reply_to_message_id=request.message_id,
        _group_id=request.group_id,
        _created_at=current,
        _ttl=request.created_at + request.ttl - current,
        _message_type=request.message_type,  # validated when the request was built
        _delivered_at="",
    )
    reply = Message.__new__(Message)
    reply.__dict__.update(_metadata=metadata, _content=content, _error=None)
    return reply


_RECORD_TYPES = (ArrayRecord, MetricRecord, ConfigRecord)


def set_message_id(msg: Message, message_id: str) -> None:
    """Give a message its id, as Flower's own grids do when they store it (no public setter exists)."""
    msg.metadata.__dict__["_message_id"] = message_id


def act_as_serverapp(run_id: int) -> None:
    """Messages built in this process from now on come from the SuperLink's ServerApp of run ``run_id``.

    A Message takes its run and source from the process's task identity, which
    Flower sets when it starts a ServerApp process; the in-process engine is one.
    """
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.task_id = 1
    TaskIdentity.run_id = run_id
    TaskIdentity.node_id = SUPERLINK_NODE_ID


# -- the Simulation Engine's message dispatcher -------------------------------------
#
# Flower 1.42's vce_api.add_messages_to_queue polls every 0.1 s with one
# LinkState.get_message_ins(node_id, limit=1) per registered node, and each of
# those scans every stored message: nodes x messages work per poll, under the
# state's lock. With 10,000 virtual nodes a round then costs seconds even when
# 100 clients are sampled (benchmarks/README.md, 'scale'). The linear dispatcher
# scans the stored messages once per poll, under the same lock, runs Flower's
# own _check_stored_messages (TTL and run checks) on the undelivered
# candidates, and hands out at most one message per node per poll, as limit=1
# does; it polls every 10 ms instead of every 100 ms. The wait between polls is
# at least POLL_S and at least LOCK_SHARE^-1 - 1 times the last scan, so the
# scans hold the state's lock at most ~LOCK_SHARE of the time (many thousand
# stored messages, e.g. discovery at 10,000 nodes).

POLL_S = 0.01
LOCK_SHARE = 0.1


def add_messages_to_queue(state: Any, queue: Queue, nodes_mapping: dict[int, int], f_stop: threading.Event) -> None:
    """Drop-in for ``flwr.server.superlink.fleet.vce.vce_api.add_messages_to_queue``."""
    from flwr.supercore.date import now

    while not f_stop.is_set():
        batch = []
        with state.lock:
            started = time.perf_counter()  # the scan, not the wait for the lock
            candidates = [
                msg_id
                for msg_id, msg in list(state.message_ins_store.items())
                if msg.metadata.delivered_at == "" and msg.metadata.dst_node_id in nodes_mapping
            ]
            if candidates:
                state._check_stored_messages(set(candidates))  # noqa: SLF001 - Flower's own validity checks
                stamp = now().isoformat()
                seen: set[int] = set()
                for msg_id in candidates:
                    msg = state.message_ins_store.get(msg_id)
                    if msg is None or msg.metadata.dst_node_id in seen:
                        continue
                    seen.add(msg.metadata.dst_node_id)
                    msg.metadata.delivered_at = stamp
                    batch.append(msg)
        scan_s = time.perf_counter() - started
        for msg in batch:
            queue.put(msg)
        f_stop.wait(max(POLL_S, scan_s * (1.0 / LOCK_SHARE - 1.0)))


def dispatcher_wanted() -> bool:
    """Whether the linear dispatcher applies (supported Flower, not turned off)."""
    return os.environ.get(DISPATCHER_ENV, "linear") != "flower" and fast_paths()


@contextmanager
def linear_dispatcher() -> Iterator[bool]:
    """Use the linear dispatcher inside the block (nested blocks are no-ops); yields whether it is on."""
    from flwr.server.superlink.fleet.vce import vce_api

    original = vce_api.add_messages_to_queue
    if original is add_messages_to_queue or not dispatcher_wanted():
        yield original is add_messages_to_queue
        return
    vce_api.add_messages_to_queue = add_messages_to_queue  # run_api looks it up at call time
    try:
        yield True
    finally:
        vce_api.add_messages_to_queue = original


# -- reusing the ClientApp actors of Flower's Ray backend ---------------------------


@dataclass
class ActorReuse:
    """The actor pool kept between simulations by :func:`reusing_client_actors`, and how often it was reused."""

    pool: Any = None
    reused: int = 0
    enabled: bool = field(default=True)

    def drop(self) -> None:
        """End the kept actors (a simulation ended with actors busy or lost, or the session ends)."""
        pool, self.pool = self.pool, None
        if pool is not None:
            kill_actors(pool)


def kill_actors(pool: Any) -> None:
    """End every ClientApp actor of a Flower ``BasicActorPool`` with ``ray.kill``.

    Flower's ``terminate_all_actors`` asks each idle actor to exit, and each
    logs the warning 'Manually terminating ClientAppActor' as it does.
    """
    import ray

    for actor in [*pool.pool, *pool._future_to_actor.values()]:  # noqa: SLF001
        ray.kill(actor, no_restart=True)


def _idle(pool: Any) -> bool:
    """Every actor of a Flower ``BasicActorPool`` is back in the pool, none lost or busy."""
    return not pool._future_to_actor and len(pool.pool) == pool.num_actors  # noqa: SLF001


@contextmanager
def reusing_client_actors() -> Iterator[ActorReuse]:
    """Inside the block, a simulation reuses the previous one's ClientApp actors.

    Flower 1.42's Ray backend starts new ClientApp actors for every
    simulation. Inside this block ``RayBackend.build`` reuses the kept pool
    when it asks for the same resources and all its actors came back idle,
    and ``RayBackend.terminate`` keeps an idle pool running for the next
    simulation; a pool left busy or with lost actors is killed. The kept
    actors are killed when the block ends. Without the fast paths
    (another Flower version) nothing is patched: every simulation starts its
    own actors, as in Flower.
    """
    reuse = ActorReuse(enabled=fast_paths())
    if not reuse.enabled:
        yield reuse
        return
    from flwr.server.superlink.fleet.vce.backend import raybackend

    original_build = raybackend.RayBackend.build
    original_terminate = raybackend.RayBackend.terminate

    def build_reusing_actors(self: Any, app_fn: Any) -> None:
        pool = reuse.pool
        if pool is not None and pool.client_resources == self.client_resources and _idle(pool):
            self.pool, self.app_fn = pool, app_fn
            reuse.reused += 1
            return
        reuse.drop()
        original_build(self, app_fn)
        reuse.pool = self.pool

    def keep_idle_actors(self: Any) -> None:
        if self.pool is not None and not _idle(self.pool):
            if reuse.pool is self.pool:
                reuse.drop()
            else:
                kill_actors(self.pool)

    raybackend.RayBackend.build = build_reusing_actors
    raybackend.RayBackend.terminate = keep_idle_actors
    try:
        yield reuse
    finally:
        raybackend.RayBackend.build = original_build
        raybackend.RayBackend.terminate = original_terminate
        reuse.drop()


# -- the Simulation Engine's node -> partition table ---------------------------------


@contextmanager
def simulation_node_table() -> Iterator[Callable[[float], Mapping[int, int] | None] | None]:
    """Inside the block, the Simulation Engine's own table of which virtual node holds which partition.

    Flower 1.42's ``vce_api._register_nodes`` creates the virtual nodes, node
    ``i`` holding partition ``i``, and returns ``{node_id: partition_id}``; the
    engine builds every node's ``node_config`` (``partition-id``) from it. This
    records the table it returns and yields a function that waits up to the
    given seconds for it (:data:`term_fl.federation.loop.NodePartitions`), so that
    the server need not ask 10,000 nodes which partition each holds (10,000
    Ray round trips; benchmarks/README.md, 'discovery'). Yields None (ask
    every node) without the fast paths or with ``TERM_FL_DISCOVERY=query``.
    """
    if os.environ.get(DISCOVERY_ENV) == "query" or not fast_paths():
        yield None
        return
    from flwr.server.superlink.fleet.vce import vce_api

    table: dict[int, int] = {}
    ready = threading.Event()
    original = vce_api._register_nodes  # noqa: SLF001

    def register_nodes(num_nodes: int, state_factory: Any) -> dict[int, int]:
        mapping = original(num_nodes, state_factory)
        table.update(mapping)
        ready.set()
        return mapping

    def known(timeout: float) -> Mapping[int, int] | None:
        return dict(table) if ready.wait(timeout) else None

    vce_api._register_nodes = register_nodes  # start_vce looks it up at call time
    try:
        yield known
    finally:
        vce_api._register_nodes = original
