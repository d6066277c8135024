"""A sweep's cells as Ray tasks across a cluster's nodes (``term-fl sweep --parallel N`` / ``--ray-address``).

Each unfinished cell, or each batched group of cells (``--group-size``), is
one Ray task (:func:`term_fl.runs.ray_cells.run_cells`) asking for one CPU
(one GPU when a cell trains on CUDA). The tasks run on the nodes of the
cluster at ``--ray-address`` (joined, never stopped), or of a private Ray
instance with ``--parallel`` CPUs; at most ``--parallel`` tasks are in
flight at once (without it, as many as the cluster's CPUs take).

The driver (this process) alone writes the results store and the run
directories: each task streams its cells' records to one inbox, an actor
pinned to the driver's node (:class:`~term_fl.runs.ray_cells.Inbox`), and the driver hands them to the
cells' :class:`~term_fl.runs.run.RunRecorder`\\ s as they come (a round every
:data:`~term_fl.runs.ray_cells.FLUSH_S` s at the latest), so the dashboard
shows the cells live and a node needs neither the store nor the sweep's
folder. A task whose node or worker dies is run again by Ray on another
node (:data:`RETRIES` times); the driver records the lost attempt as failed
(its files set aside, as a resumed sweep does) and the rerun as the cell.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

from term_fl.cli.sweep_groups import CellJob
from term_fl.results import ResultsStore
from term_fl.runs.ray_cells import CellEvent, Inbox, cell_resources, run_cells
from term_fl.runs.run import RunRecorder, run_id_for

__all__ = ["RETRIES", "run_on_ray"]

RETRIES = 3
"""How many times Ray runs a task again whose worker or node died (Ray's ``max_retries``)."""

POLL_S = 0.2
"""How often the driver takes the queued rounds while no task ends (a task's end wakes it at once)."""


@dataclass
class _Cell:
    """The driver's side of a cell: its job, the recorder of its current attempt, and how it ended."""

    job: CellJob
    attempt: str = ""
    attempts: int = 0
    nodes: list[str] = field(default_factory=list)
    recorder: RunRecorder | None = None
    rounds: int = 0
    summary: dict[str, Any] | None = None
    done: bool = False


def run_on_ray(
    groups: Sequence[Sequence[CellJob]],
    store: ResultsStore,
    console: Console,
    *,
    address: str,
    parallel: int | None,
    set_aside: Any,
) -> dict[int, dict[str, Any] | None]:
    """Run every group as a Ray task; each job's summary by its index (None where the cell failed).

    ``set_aside(cell_dir, store)`` moves a lost attempt's files out of the
    cell's folder (:func:`term_fl.cli.sweep.set_aside_earlier_attempt`).
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from term_fl.engines.ray_cluster import sweep_cluster

    cells = {job.index: _Cell(job) for group in groups for job in group}
    with sweep_cluster(address, parallel):
        here = ray.get_runtime_context().get_node_id()
        inbox = ray.remote(Inbox).options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(here, False)
                                          ).remote()
        task = ray.remote(run_cells)
        cpus = int(ray.cluster_resources().get("CPU", 0))
        # a private Ray has `parallel` CPUs and Ray starts a task as one frees: hand it every task at once
        limit = parallel if parallel and address else max(len(groups), 1)
        console.print(f"{len(groups)} Ray tasks ({len(cells)} cells) on {len(ray.nodes())} node(s) with {cpus} CPUs, "
                      f"at most {min(parallel or cpus, len(groups))} at a time" + (f", cluster {address}" if address else ""))
        waiting = list(groups)
        running: dict[Any, Sequence[CellJob]] = {}
        try:
            while waiting or running:
                while waiting and len(running) < limit:
                    group = waiting.pop(0)
                    resources = cell_resources([job.cell for job in group])
                    if resources["num_gpus"] > ray.cluster_resources().get("GPU", 0):
                        _refuse_gpu(group, cells, console)  # Ray would keep the task waiting forever
                        continue
                    ref = task.options(**resources, max_retries=RETRIES).remote(
                        [(job.index, job.cell) for job in group], inbox)
                    running[ref] = group
                # wake on a task's end (its last records are then in the inbox) or every POLL_S for the rounds
                ray.wait(list(running), num_returns=1, timeout=POLL_S)
                ended, _ = ray.wait(list(running), num_returns=len(running), timeout=0)
                _take(inbox, cells, store, console, set_aside)
                for ref in ended:
                    _ended(ref, running.pop(ref), cells, console)
        except BaseException:
            for ref in running:
                ray.cancel(ref, force=True)
            for cell in cells.values():
                _close(cell, "interrupted", "the sweep stopped before the cell's Ray task ended")
            raise
    return {index: cell.summary for index, cell in cells.items()}


def _take(inbox: Any, cells: dict[int, _Cell], store: ResultsStore, console: Console, set_aside: Any) -> None:
    """Hand every record in the inbox to its cell's recorder, in the order the tasks sent them."""
    import ray

    for batch in ray.get(inbox.take.remote()):
        for event in batch:
            _handle(event, cells[event.index], store, console, set_aside)


def _handle(event: CellEvent, cell: _Cell, store: ResultsStore, console: Console, set_aside: Any) -> None:
    """Record one event of a cell; a new attempt's start closes an earlier attempt that never ended."""
    job = cell.job
    if event.kind == "start":
        if cell.summary is not None:  # finished before its task was lost: the rerun's copy is not recorded
            return
        if cell.recorder is not None and not cell.done:
            _close(cell, "failed", f"its Ray task was lost at round {cell.rounds} (node {cell.nodes[-1][:8]} or its "
                                   "worker died); the cell was run again")
            console.print(f"{job.label}: [yellow]its Ray task was lost[/] on node {cell.nodes[-1][:8]} after "
                          f"{cell.rounds} rounds; running it again")
        if cell.recorder is not None:
            set_aside(job.cell_dir, store)
        cell.attempt, cell.rounds, cell.done = event.attempt, 0, False
        cell.attempts += 1
        cell.nodes.append(event.node)
        cell.recorder = RunRecorder(store, job.cell_dir.resolve(), run_id=run_id_for(job.cell))
        cell.recorder.start(job.cell, event.payload)
        console.print(f"{job.label}: started on node {event.node[:8]}" + (
            f" (attempt {cell.attempts})" if cell.attempts > 1 else ""))
        return
    if event.attempt != cell.attempt or cell.recorder is None:
        return  # a lost attempt's late record
    if event.kind == "round":
        cell.recorder.record_round(event.payload)
        cell.rounds = event.payload.server_round
        return
    status, result, error = event.payload
    cell.recorder.finish(status, result, error)
    cell.done = True
    cell.summary = cell.recorder.summary or {} if status == "finished" else None
    if status == "finished":
        console.print(f"{job.label}: {cell.rounds} rounds on node {event.node[:8]}")


def _ended(ref: Any, group: Sequence[CellJob], cells: dict[int, _Cell], console: Console) -> None:
    """A task ended: say which of its cells failed, and close those whose end never came (the task was lost)."""
    import ray

    try:
        errors = ray.get(ref)
    except Exception as exc:  # noqa: BLE001 - retries spent, or the task could not run: its unfinished cells failed
        reason = f"its Ray task failed: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        errors = [None if cells[job.index].summary is not None else reason for job in group]
    for job, error in zip(group, errors, strict=True):
        cell = cells[job.index]
        if error is None and cell.summary is not None:
            continue
        error = error or "its Ray task ended without recording the cell's end"
        _close(cell, "failed", error)
        cell.summary = None
        console.print(f"{job.label}: [bold red]failed[/]: {error.splitlines()[0]}")


def _refuse_gpu(group: Sequence[CellJob], cells: dict[int, _Cell], console: Console) -> None:
    """The cells of a task that asks for a GPU on a Ray cluster without one fail at once, saying so."""
    for job in group:
        cells[job.index].summary = None
        console.print(f"{job.label}: [bold red]failed[/]: client.device = {job.cell.client.device!r} asks Ray for a "
                      "GPU and the Ray cluster has none; run it on a cluster with GPUs, or set client.device = 'cpu'")


def _close(cell: _Cell, status: str, error: str) -> None:
    """Record the current attempt as ended with ``status`` when it has not ended yet."""
    if cell.recorder is not None and not cell.done:
        cell.recorder.finish(status, None, error)
        cell.done = True
