"""A run: its id, its directory, the recorder that writes it and the results store, and :func:`run_one`.

A run directory holds ``config.json`` (the resolved scenario), ``summary.json``
(the contract of docs/contracts.md) and ``model.pt`` (the final global model as a torch
state dict, loadable with :func:`load_model`); while the run goes on, its
``checkpoint.npz`` (:mod:`.checkpoint`) and the lock file that keeps a second
process out (:mod:`term_fl.common.locks`). Every round goes to the SQLite
results store in one transaction as it completes.

A run ends in this order (README, "Results store"): model.pt through a
temporary file and a rename, summary.json's text under a temporary name, the
store row's final status, then summary.json renamed into place and the
checkpoint removed. A failure to write either file (a full disk) removes
both temporary files and records the run as ``failed`` with the reason; a
signal on the way records it as ``interrupted``, its checkpoint kept.
"""

from __future__ import annotations

import io
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from term_fl import results
from term_fl.config import ConfigError, Scenario, config_hash
from term_fl.data import dataset_for
from term_fl.engines import run_scenario
from term_fl.federation.loop import Checkpoint, FederationError, FederationResult, Recorder, RoundRecord
from term_fl.common.jsonable import plain
from term_fl.common.keys import VAL
from term_fl.common.locks import FolderInUse, FolderLock, holder_of
from term_fl.learning.models import TermModel, model_for, set_weights
from term_fl.results import ResultsStore, StoreError
from term_fl.runs.checkpoint import CHECKPOINT_FILE, remove_checkpoint, save_checkpoint
from term_fl.runs.history import recorded_history
from term_fl.runs.summary import build_summary, clean_device_statistics, data_record, git_commit, versions

__all__ = [
    "DEFAULT_RUNS_DIR", "RUN_FILES", "Heartbeat", "OutputInUse", "RunFailed", "RunRecorder", "build_summary",
    "check_output_dir", "clean_device_statistics", "data_record", "git_commit", "load_model", "run_id_for",
    "run_id_in", "run_one", "run_recorded", "save_model", "versions", "write_atomic", "write_summary",
]

log = logging.getLogger("term_fl")

DEFAULT_RUNS_DIR = Path("runs")
RUN_FILES = ("config.json", "summary.json", "model.pt", CHECKPOINT_FILE)


class OutputInUse(ConfigError):
    """The output directory already holds another run's files."""


class RunFailed(FederationError):
    """The run started (it is in the store) and failed: recorded as ``failed``; the message says why."""


def check_output_dir(run_dir: Path) -> None:
    """Refuse a run directory that another process works in, or that holds another run's files (they stay where
    the store row points)."""
    if not run_dir.exists():
        return
    if not run_dir.is_dir():
        raise OutputInUse(f"--out {run_dir}: is a file, not a directory; give a directory for the run's files")
    holder = holder_of(run_dir)
    if holder is not None:
        raise FolderInUse(f"--out {run_dir} is in use by another term-fl process: {holder.describe()}; wait "
                          "until it ends, or give another directory")
    check_output_dir_files(run_dir)


def check_output_dir_files(run_dir: Path) -> None:
    """Refuse a run directory that holds another run's files."""
    present = [name for name in RUN_FILES if (run_dir / name).exists()]
    if present:
        owner = run_id_in(run_dir)
        raise OutputInUse(
            f"--out {run_dir}: already holds the files of {'run ' + repr(owner) if owner else 'another run'} "
            f"({', '.join(present)}); give a new directory (or none: ./runs/<run id>), or remove that run's files"
        )


def run_id_in(run_dir: Path) -> str | None:
    """The run id in a run directory's summary.json, if it has a readable one."""
    try:
        return json.loads((run_dir / "summary.json").read_text()).get("run_id")
    except (OSError, ValueError, AttributeError):
        return None


def temporary(path: Path) -> Path:
    """The temporary sibling a file is written to before it is renamed into place."""
    return path.with_name(f".{path.name}.tmp")


def write_atomic(path: Path, write: Any) -> None:
    """Write a file through a temporary sibling and a rename: readers see the old file or the whole new one.

    A write that fails (a full disk) removes the temporary file again.
    """
    tmp = temporary(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def summary_text(summary: dict[str, Any]) -> str:
    return json.dumps(plain(summary), indent=2, allow_nan=False) + "\n"


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    text = summary_text(summary)
    write_atomic(run_dir / "summary.json", lambda p: p.write_text(text))


def run_id_for(scenario: Scenario) -> str:
    """The store's time-sortable id, plus what ran: e.g. ``20261126-011530-ab12cd-default-term-s0``."""
    return f"{results.new_run_id()}-{scenario.name}-{scenario.strategy.name}-s{scenario.run.seed}"


def run_one(
    scenario: Scenario,
    store: ResultsStore,
    *,
    out_dir: Path | None = None,
    on_round: Callable[[RoundRecord, int], None] | None = None,
) -> RunRecorder:
    """Run ``scenario``, recording into ``store`` and ``out_dir`` (default ./runs/<run id>).

    The recorder is returned in every case that does not raise; a failing
    run is marked failed (or interrupted) in the store, its completed rounds
    stay readable, and the error propagates: a :class:`FederationError`
    (:class:`RunFailed` for any other error once the run is in the store) or
    ``KeyboardInterrupt``; an error before that (bad input) as it is.
    """
    run_id = run_id_for(scenario)
    run_dir = Path(out_dir) if out_dir is not None else DEFAULT_RUNS_DIR / run_id
    check_output_dir(run_dir.resolve())  # before any engine starts; RunRecorder.start checks again
    recorder = RunRecorder(store, run_dir.resolve(), run_id=run_id)
    run_recorded(scenario, recorder, on_round=on_round)
    return recorder


def run_recorded(
    scenario: Scenario,
    recorder: RunRecorder,
    *,
    on_round: Callable[[RoundRecord, int], None] | None = None,
    resume: Checkpoint | None = None,
) -> None:
    """Run ``scenario`` (after ``resume``'s round) into ``recorder``; an error once the run is in the store is a
    :class:`RunFailed` (the command line's exit status 1), one before it keeps its type (bad input: status 2)."""
    try:
        run_scenario(scenario, recorder, on_round=on_round, resume=resume)
    except FederationError:
        raise
    except Exception as exc:
        if not recorder.recorded:
            raise
        raise RunFailed(f"{type(exc).__name__}: {exc}") from exc


class Heartbeat:
    """Records a running run's sign of life in the store every ``every`` seconds, from a daemon thread.

    Readers show a running run whose heartbeat is older than
    :data:`term_fl.results.schema.LOST_AFTER_S` as ``lost``: a killed process stops
    beating, whichever machine or container it ran in.
    """

    def __init__(self, store: ResultsStore, run_id: str, every: float = results.HEARTBEAT_S) -> None:
        self.store, self.run_id, self.every = store, run_id, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="term-fl-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.every):
            try:
                if not self.store.heartbeat(self.run_id):
                    return  # the run is no longer running
            except Exception as exc:  # a busy or closed store: the next beat tries again  # noqa: BLE001
                log.debug("heartbeat of run %s not recorded: %s", self.run_id, exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=results.schema.BUSY_TIMEOUT_S)


class RunRecorder(Recorder):
    """Writes one run to its directory and to the results store.

    ``resume``: the round a stopped run goes on after (``term-fl run
    --resume``, :mod:`.resume`); its row is reopened instead of created and
    its rounds up to there are read back; ``earlier_s``: the wall time its
    earlier processes took. The run folder is locked from :meth:`start` to
    the end of :meth:`finish`.
    """

    def __init__(self, store: ResultsStore, run_dir: Path, *, run_id: str | None = None,
                 resume: int | None = None, earlier_s: float = 0.0) -> None:
        self.store = store
        self.run_dir = Path(run_dir)
        self.run_id = run_id
        self.summary: dict[str, Any] | None = None
        self.recorded = False  # whether the store holds the run (created, or reopened to resume)
        self._resume = resume
        self._scenario: Scenario | None = None
        self._data: dict[str, Any] = {}
        self._start = time.perf_counter()
        self._earlier_s = earlier_s  # wall time of the run's earlier processes (a resumed run)
        self._last: RoundRecord | None = None
        self._last_evaluated: RoundRecord | None = None
        self._validation_means: list[tuple[int, float]] = []
        self._completed = 0
        self._heartbeat: Heartbeat | None = None
        self._lock = FolderLock(self.run_dir, f"the run folder {self.run_dir}")
        self._ended = False

    def start(self, scenario: Scenario, dataset_metadata: dict[str, Any]) -> None:
        self._scenario = scenario
        self._start = time.perf_counter()
        self._data = data_record(scenario, dataset_metadata)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._lock.acquire()
        try:
            if self._resume is None:
                self._create(scenario)
            else:
                self._reopen()
        except BaseException:
            self._lock.release()
            raise
        self._heartbeat = Heartbeat(self.store, self.run_id)

    def _create(self, scenario: Scenario) -> None:
        check_output_dir_files(self.run_dir)
        (self.run_dir / "config.json").write_text(json.dumps(scenario.model_dump(), indent=2) + "\n")
        self.run_id = self.store.create_run(
            run_id=self.run_id or run_id_for(scenario),
            name=scenario.run_name,
            scenario=scenario.name,
            engine=scenario.run.engine,
            strategy=scenario.strategy.name,
            strategy_params=scenario.strategy_params(),
            seed=scenario.run.seed,
            config_hash=config_hash(scenario),
            config=scenario.model_dump(),
            data=self._data,
            rounds_planned=scenario.run.rounds,
            run_dir=str(self.run_dir),
        )
        self.recorded = True

    def _reopen(self) -> None:
        """The stopped run ``running`` again, its rounds after the resumed one removed, the rest read back."""
        assert self.run_id is not None and self._resume is not None
        self.store.reopen_run(self.run_id, keep_rounds=self._resume)
        self.recorded = True
        history = recorded_history(self.store, self.run_id, self._resume)
        self._last, self._last_evaluated, self._validation_means = history
        self._completed = self._resume

    def record_round(self, record: RoundRecord) -> None:
        self.store.record_round(
            self.run_id,
            record.server_round,
            train_rows=record.train_rows,
            eval_rows=record.eval_rows,
            stats=record.stats,
            status=record.status,
            diagnostics=record.diagnostics,
            duration_s=record.duration_s,
            excluded=record.excluded,
        )
        self._last = record
        self._completed = record.server_round
        if record.stats:
            self._last_evaluated = record
            mean = (record.stats.get(VAL) or {}).get("mean")
            if mean is not None:
                self._validation_means.append((record.server_round, mean))

    def checkpoint(self, checkpoint: Checkpoint) -> None:
        """Keep the model and the strategy's state after the round in the run folder (:mod:`.checkpoint`)."""
        assert self._scenario is not None
        save_checkpoint(self.run_dir, checkpoint, run_id=self.run_id, config_hash=config_hash(self._scenario),
                        wall_time_s=self._wall_time())

    def _wall_time(self) -> float:
        return self._earlier_s + time.perf_counter() - self._start

    def finish(self, status: str, result: FederationResult | None, error: str | None = None) -> None:
        """Record how the run ended: its files and its store row (the order in the module's docstring).

        A run that finished but whose files cannot be written (a full disk) is
        recorded as ``failed`` with the reason, and :class:`RunFailed` says so;
        one interrupted while they are written (a signal) is recorded as
        ``interrupted`` without them (its last checkpoint stays, for
        ``--resume``), and the interruption goes on; a run that did not
        finish keeps its status, its summary.json written where the disk allows.
        """
        assert self._scenario is not None and self.run_id is not None
        if self._ended:  # recorded already (interrupt)
            return
        self._ended = True
        if self._heartbeat is not None:
            self._heartbeat.stop()
        try:
            if status == "finished":
                self._finish_with_files(result)
            else:
                self._close(status, error)
        finally:
            self._lock.release()

    def interrupt(self, reason: str) -> None:
        """Record the run as interrupted now: from a handler of a signal that ends the process (Flower's graceful
        exit of a deployment's ServerApp), before whatever else that handler does.

        Nothing when the run has not started or has ended, or when the signal
        arrived while this thread was writing to the store (then the
        exception the exit raises in the server loop records it).
        """
        if not self.recorded or self._ended or self.store.writing():
            return
        self.finish("interrupted", None, reason)

    def _summary(self, status: str, error: str | None) -> dict[str, Any]:
        assert self._scenario is not None and self.run_id is not None
        return build_summary(
            self._scenario,
            run_id=self.run_id,
            status=status,
            rounds_completed=self._completed,
            last=self._last,
            last_evaluated=self._last_evaluated,
            validation_means=self._validation_means,
            data=self._data,
            wall_time_s=self._wall_time(),
            error=error,
        )

    def _finish_with_files(self, result: FederationResult | None) -> None:
        """model.pt, summary.json's text, the store row, summary.json in place; or ``failed`` without them."""
        self.summary = self._summary("finished", None)
        model, text = self.run_dir / "model.pt", temporary(self.run_dir / "summary.json")
        writing = "the run's files: model.pt"
        try:
            if result is not None:
                write_atomic(model, lambda p: save_model(p, result))
            writing = "the run's files: summary.json"
            text.write_text(summary_text(self.summary))
            # The store row first, then summary.json (a rename): a crash between the two leaves a
            # finished row without summary.json, which the sweep rewrites from the row
            # (term_fl.cli.sweep.finished_summary), never a finished summary.json beside a row
            # that says otherwise.
            writing = "the results store"
            self.store.finish_run(self.run_id, "finished", summary=self.summary)
        except (OSError, sqlite3.Error, StoreError) as exc:
            text.unlink(missing_ok=True)
            model.unlink(missing_ok=True)  # finished with both files, or failed with neither
            reason = f"cannot write {writing}: {exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}"
            self._close("failed", reason)
            raise RunFailed(f"{reason}; the run is recorded as failed (term-fl run --resume {self.run_id} "
                            "writes them once the cause is fixed)") from exc
        except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP while the end was written: resumable
            text.unlink(missing_ok=True)
            model.unlink(missing_ok=True)
            self._close("interrupted", f"{str(exc) or 'interrupted by the user'} while writing {writing}")
            raise
        os.replace(text, self.run_dir / "summary.json")
        remove_checkpoint(self.run_dir)  # model.pt holds the final model

    def _close(self, status: str, error: str | None) -> None:
        """Record a run that did not finish: its store row (without the summary when a full store has no room
        for it), then its summary.json where the disk allows."""
        self.summary = self._summary(status, error)
        try:
            self.store.finish_run(self.run_id, status, summary=self.summary, error=error)
        except sqlite3.OperationalError:
            self.store.finish_run(self.run_id, status, error=error)
        try:
            write_summary(self.run_dir, self.summary)
        except OSError as exc:
            log.warning("summary.json of run %s was not written: %s", self.run_id, describe_os_error(exc))


def describe_os_error(exc: BaseException) -> str:
    """``model.pt: No space left on device`` for an OSError with a file name, else the error's text."""
    if isinstance(exc, OSError) and exc.strerror:
        name = Path(exc.filename).name if exc.filename else ""
        return f"{name}: {exc.strerror}" if name else exc.strerror
    return f"{type(exc).__name__}: {exc}"


def save_model(path: Path, result: FederationResult) -> None:
    """The final global model as a torch state dict in ``path``.

    Serialised in memory first: a failed write (a full disk) is then an
    ``OSError`` naming its cause, where torch's own file writer reports it as
    a ``RuntimeError`` about zip positions.
    """
    state = {k: torch.from_numpy(np.array(v.numpy(), copy=True)) for k, v in result.arrays.items()}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    path.write_bytes(buffer.getbuffer())


def load_model(run_dir: str | Path) -> TermModel:
    """The final global model of a run directory, ready for inference."""
    run_dir = Path(run_dir)
    for name in ("config.json", "model.pt"):
        if not (run_dir / name).is_file():
            raise FileNotFoundError(f"{run_dir / name} does not exist: is {run_dir} a finished term-fl run directory?")
    scenario = Scenario.model_validate_json((run_dir / "config.json").read_text())
    model = model_for(scenario, dataset_for(scenario))
    state = torch.load(run_dir / "model.pt", weights_only=True)
    set_weights(model, {k: v.numpy() for k, v in state.items()})
    model.eval()
    return model
