"""``term-fl run --resume RUN_ID``: a run that stopped goes on from its last checkpoint.

A run that was interrupted (Ctrl-C, SIGTERM, SIGHUP), lost (killed, its
heartbeat stale) or failed (a full disk while it wrote its files) keeps its
rounds in the store and, in its folder, the checkpoint of its last
``run.checkpoint_every``-th round (:mod:`.checkpoint`). Resuming it reads its
settings from the store, removes the rounds recorded after the checkpoint,
and runs the rest with the checkpoint's model and strategy state, into the
same run id and folder: the final numbers are those of an uninterrupted run
with the same seed (tests/test_resume.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from pydantic import ValidationError

from term_fl.common.errors import ConfigError
from term_fl.common.locks import FolderInUse, holder_of
from term_fl.config import Scenario, config_hash
from term_fl.federation.records import Checkpoint, RoundRecord
from term_fl.results import LOST_AFTER_S, ResultsStore, RunInfo
from term_fl.runs.checkpoint import CheckpointError, load_checkpoint
from term_fl.runs.run import RunRecorder, run_recorded

__all__ = ["RESUMABLE", "ResumeError", "Resumable", "resumable", "resume_run"]

RESUMABLE = ("interrupted", "lost", "failed")
"""The statuses of a run that ``--resume`` goes on with."""


class ResumeError(ConfigError):
    """The run cannot be resumed; the message says why (the command line's exit status 2)."""


class Resumable(NamedTuple):
    """A stopped run, ready to go on."""

    scenario: Scenario
    run_dir: Path
    checkpoint: Checkpoint | None  # None: no checkpoint yet, the run starts again from round 1
    earlier_s: float  # the wall time its earlier processes took


def resumable(store: ResultsStore, run_id: str) -> Resumable:
    """What resuming ``run_id`` needs; :class:`ResumeError` naming the reason when it cannot be resumed."""
    info = store.get_run(run_id)
    _check_stopped(info)
    try:
        scenario = Scenario.model_validate(info.config)
    except ValidationError as exc:
        raise ResumeError(f"run {run_id!r}: its stored settings are not valid for this term-fl ({exc.errors()[0]['msg']}); "
                          "run the scenario again instead") from None
    if config_hash(scenario) != info.config_hash:
        raise ResumeError(f"run {run_id!r} was recorded by a term-fl whose settings hash differently "
                          f"({info.config_hash} there, {config_hash(scenario)} here): resuming could change its "
                          "numbers; run the scenario again instead")
    if not info.run_dir or not Path(info.run_dir).is_dir():
        raise ResumeError(f"run {run_id!r}: its folder {info.run_dir} is gone; its checkpoint was there")
    run_dir = Path(info.run_dir)
    try:
        loaded = load_checkpoint(run_dir)
    except CheckpointError as exc:
        raise ResumeError(f"run {run_id!r}: {exc}") from None
    if loaded is None:
        return Resumable(scenario, run_dir, None, 0.0)
    checkpoint, meta = loaded
    if meta.get("run_id") != run_id or meta.get("config_hash") != info.config_hash:
        raise ResumeError(f"run {run_id!r}: the checkpoint in {run_dir} is of another run ({meta.get('run_id')})")
    if checkpoint.server_round > min(info.rounds_completed, scenario.run.rounds):
        raise ResumeError(f"run {run_id!r}: its checkpoint is of round {checkpoint.server_round}, but the store "
                          f"holds {info.rounds_completed} of its rounds; the two do not belong together")
    return Resumable(scenario, run_dir, checkpoint, float(meta.get("wall_time_s") or 0.0))


def _check_stopped(info: RunInfo) -> None:
    """A run that finished, that a live process still runs, or whose heartbeat is fresh, is not resumed."""
    if info.status == "finished":
        raise ResumeError(f"run {info.run_id!r} finished; there is nothing to resume")
    holder = holder_of(info.run_dir) if info.run_dir and Path(info.run_dir).is_dir() else None
    if holder is not None:
        raise FolderInUse(f"run {info.run_id!r} is running: {holder.describe()} holds its folder {info.run_dir}")
    if info.status not in RESUMABLE:  # running, its heartbeat fresh: a process on another machine, or one just killed
        raise ResumeError(
            f"run {info.run_id!r} is running (its heartbeat is fresh), though no process of this machine holds its "
            f"folder: it may run elsewhere; a run whose process is gone is shown as lost {LOST_AFTER_S:g} s after "
            "its last heartbeat, and can be resumed then"
        )


def resume_run(
    store: ResultsStore,
    run_id: str,
    *,
    on_round: Callable[[RoundRecord, int], None] | None = None,
    ready: Resumable | None = None,
) -> RunRecorder:
    """Go on with the stopped run ``run_id`` after its last checkpoint (from round 1 without one).

    ``ready``: :func:`resumable`'s answer, when the caller has it already.
    Raises :class:`ResumeError` (and ``RunNotFound``) before anything runs,
    and afterwards as :func:`term_fl.runs.run.run_one` does.
    """
    ready = ready or resumable(store, run_id)
    after = ready.checkpoint.server_round if ready.checkpoint is not None else 0
    recorder = RunRecorder(store, ready.run_dir, run_id=run_id, resume=after, earlier_s=ready.earlier_s)
    run_recorded(ready.scenario, recorder, on_round=on_round, resume=ready.checkpoint)
    return recorder
