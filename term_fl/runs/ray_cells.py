"""A sweep's cells as Ray tasks: what runs on a cluster's node, and the rounds it streams back to the driver.

``term-fl sweep --parallel N`` / ``--ray-address`` hands each unfinished
cell, or each batched group of cells (``--group-size``), to a Ray task
(:func:`run_cells`). The task runs its cells on the in-process engine, as the
sweep's own process would, with torch pinned to ``run.threads`` threads,
and writes nothing: it has no results store and no run directory (the node
may be another machine). A :class:`RoundStream` recorder sends what a
:class:`~term_fl.runs.run.RunRecorder` would record (the start with the
data's metadata, every round's record, the end with the final model) as
:class:`CellEvent`\\ s to the driver's :class:`Inbox` actor; the driver alone writes
the store and the run directories (:mod:`term_fl.cli.sweep_ray`), so the
dashboard shows a Ray cell's rounds as they come. Rounds are sent in
batches, at most every :data:`FLUSH_S` seconds; the start and the end at once.

Each attempt of a task has its own id: when a node dies, Ray runs the task
again elsewhere (``max_retries``), and the driver sees a new attempt's
start for a cell whose earlier attempt never ended.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

from term_fl.config import Scenario
from term_fl.engines import run_scenario
from term_fl.federation.loop import FederationResult, Recorder, RoundRecord
from term_fl.learning.threads import pinned_threads

__all__ = ["FLUSH_S", "CellEvent", "Inbox", "RoundStream", "cell_resources", "run_cells"]

FLUSH_S = 0.5


@dataclass(frozen=True)
class CellEvent:
    """One thing a cell's run recorded, on its way to the driver.

    ``kind`` is ``start`` (``payload``: the dataset's metadata), ``round``
    (a :class:`RoundRecord`) or ``finish`` (``(status, result or None,
    error or None)``); ``index`` is the cell's place in the sweep, ``attempt``
    the task attempt's id, ``node`` the Ray node it ran on.
    """

    index: int
    attempt: str
    node: str
    kind: str
    payload: Any


class Inbox:
    """The driver's mailbox, a Ray actor on the driver's node: tasks :meth:`put` batches in, the driver takes them out.

    A plain (not asyncio) actor runs the calls of one caller in the order
    they were sent, so a cell's records arrive in order. Tasks send without
    waiting for the reply: a task blocked in ``ray.get`` lends its CPU back to
    Ray, which would then start another task beside it (more cells at once
    than ``--parallel`` or the CPUs allow).
    """

    def __init__(self) -> None:
        self._items: list[list[CellEvent]] = []

    def put(self, batch: list[CellEvent]) -> None:  # noqa: D102
        self._items.append(batch)

    def take(self) -> list[list[CellEvent]]:  # noqa: D102
        items, self._items = self._items, []
        return items


class RoundStream(Recorder):
    """A recorder that sends a cell's start, rounds and end to ``inbox`` (an :class:`Inbox` actor handle)."""

    def __init__(self, inbox: Any, index: int, attempt: str, node: str) -> None:
        self.inbox, self.index, self.attempt, self.node = inbox, index, attempt, node
        self._pending: list[CellEvent] = []
        self._sent = time.monotonic()
        self.started = False
        self.last: Any = None  # the reference of the last batch sent

    def _add(self, kind: str, payload: Any, *, now: bool) -> None:
        self._pending.append(CellEvent(self.index, self.attempt, self.node, kind, payload))
        if now or time.monotonic() - self._sent >= FLUSH_S:
            self.flush()

    def flush(self) -> None:
        """Send what is pending as one batch, without waiting (see :class:`Inbox`)."""
        if self._pending:
            self.last = self.inbox.put.remote(self._pending)
            self._pending = []
        self._sent = time.monotonic()

    def start(self, scenario: Scenario, dataset_metadata: dict[str, Any]) -> None:  # noqa: D102
        self.started = True
        self._add("start", dataset_metadata, now=True)

    def record_round(self, record: RoundRecord) -> None:  # noqa: D102
        self._add("round", record, now=False)

    def finish(self, status: str, result: FederationResult | None, error: str | None = None) -> None:  # noqa: D102
        self._add("finish", (status, result, error), now=True)


def cell_resources(cells: list[Scenario]) -> dict[str, float]:
    """What a task of ``cells`` asks Ray for: one CPU, and one GPU when a cell trains on CUDA (``client.device``)."""
    gpu = any(cell.client.device.startswith("cuda") for cell in cells)
    return {"num_cpus": 1.0, "num_gpus": 1.0 if gpu else 0.0}


def run_cells(cells: list[tuple[int, Scenario]], inbox: Any) -> list[str | None]:
    """Run a task's cells (one, or one batched group) and stream their records; each cell's error, or None.

    A cell's own failure is recorded as failed and returned as its error (Ray
    does not run the task again for it); only a lost worker or node makes Ray
    run the task again. A group that cannot start runs its cells one by one,
    as the sweep does locally.
    """
    import ray

    attempt, node = secrets.token_hex(6), ray.get_runtime_context().get_node_id()
    streams = [RoundStream(inbox, index, attempt, node) for index, _ in cells]
    try:
        return _run(cells, streams)
    finally:
        # every record in the inbox before the task ends: the driver reads a cell's end before the task's
        ray.get([stream.last for stream in streams if stream.last is not None])


def _run(cells: list[tuple[int, Scenario]], streams: list[RoundStream]) -> list[str | None]:
    scenarios = [scenario for _, scenario in cells]
    with pinned_threads(scenarios[0].run.threads or 1):
        if len(cells) > 1:
            from term_fl.engines.group import run_group

            try:
                outcomes = run_group(scenarios, streams)
                return [_error(o) if isinstance(o, BaseException) else None for o in outcomes]
            except Exception:  # noqa: BLE001 - the cells then say, one by one, what is wrong with them
                if any(stream.started for stream in streams):  # not a group that could not start
                    raise
        return [_run_alone(scenario, stream) for scenario, stream in zip(scenarios, streams, strict=True)]


def _run_alone(scenario: Scenario, stream: RoundStream) -> str | None:
    try:
        run_scenario(scenario, stream)
    except Exception as exc:  # noqa: BLE001 - recorded as failed by the server loop; the other cells go on
        stream.flush()
        return _error(exc)
    return None


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:2000]
