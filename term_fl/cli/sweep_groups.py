"""A sweep's unfinished cells in groups that train as one batched computation (``term-fl sweep --group-size N``).

Cells whose runs can share one compiled call per round
(:func:`term_fl.engines.group.group_key`: the in-process engine, the
compiled executor on the CPU, one model, one set of client settings, one
shape of data; strategies, their parameters and seeds may differ) are put
in groups of at most ``N``, in the sweep's order; every other cell runs on
its own, as without the option. A grouped cell records what it records on
its own, bit for bit, in its own run directory and store rows; finished
cells are skipped and interrupted ones resumed the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from term_fl.config import Scenario
from term_fl.engines.group import group_key
from term_fl.federation.loop import RoundRecord
from term_fl.results import ResultsStore
from term_fl.runs.grouped import run_many

__all__ = ["CellJob", "plan_groups", "run_cell_group"]


@dataclass(frozen=True)
class CellJob:
    """An unfinished cell: its position in the sweep (from 1), its console label, its scenario and folder."""

    index: int
    label: str
    cell: Scenario
    cell_dir: Path


def plan_groups(jobs: Sequence[CellJob], group_size: int) -> list[list[CellJob]]:
    """The jobs in groups of at most ``group_size`` that share a :func:`group_key`, in order of their first cell.

    A job without a key, and every job when ``group_size`` is 1, is a group of its own.
    """
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    groups: list[list[CellJob]] = []
    open_group: dict[str, list[CellJob]] = {}
    for job in jobs:
        key = group_key(job.cell) if group_size > 1 else None
        if key is None:
            groups.append([job])
            continue
        group = open_group.get(key)
        if group is None or len(group) == group_size:
            group = open_group[key] = []
            groups.append(group)
        group.append(job)
    return groups


def run_cell_group(jobs: Sequence[CellJob], store: ResultsStore, console: Console) -> list[dict[str, Any] | None]:
    """Run the jobs as one group; each job's summary, or None where its run failed (said on the console)."""
    console.print(f"{len(jobs)} cells side by side: " + ", ".join(job.label for job in jobs))

    def said(i: int, record: RoundRecord, rounds: int) -> None:
        if record.server_round == rounds:
            console.print(f"{jobs[i].label}: {rounds} rounds")

    outcomes = run_many([(job.cell, job.cell_dir) for job in jobs], store, on_round=said)
    summaries: list[dict[str, Any] | None] = []
    for job, outcome in zip(jobs, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            console.print(f"{job.label}: [bold red]failed[/]: {type(outcome).__name__}: {outcome}")
            summaries.append(None)
        else:
            summaries.append(outcome.summary or {})
    return summaries
