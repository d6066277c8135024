"""A run: its id, its directory, the recorder that writes it and the results store, and :func:`run_one`.

A run directory holds ``config.json`` (the resolved scenario), ``summary.json``
(the contract of docs/contracts.md) and ``model.pt`` (the final global model as a torch
state dict, loadable with :func:`load_model`). Every round goes to the
SQLite results store in one transaction as it completes.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

import term_fl
from term_fl import results
from term_fl.config import ConfigError, Scenario, baseline_hash, config_hash, executor_of
from term_fl.comparison.convergence import FLAT, last_fifth_change
from term_fl.data import dataset_for
from term_fl.engines import run_scenario
from term_fl.maths.fairness import fairness_summary, worst_10_devices
from term_fl.federation.loop import FederationResult, Recorder, RoundRecord
from term_fl.common.jsonable import plain
from term_fl.common.keys import SUMMARY_NAMES, TEST, VAL
from term_fl.learning.models import TermModel, model_for, set_weights
from term_fl.results import ResultsStore

log = logging.getLogger("term_fl")

DEFAULT_RUNS_DIR = Path("runs")
RUN_FILES = ("config.json", "summary.json", "model.pt")


class OutputInUse(ConfigError):
    """The output directory already holds another run's files."""


def check_output_dir(run_dir: Path) -> None:
    """Refuse a run directory that holds another run's files: they stay where the store row points."""
    if not run_dir.exists():
        return
    if not run_dir.is_dir():
        raise OutputInUse(f"--out {run_dir}: is a file, not a directory; give a directory for the run's files")
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


def write_atomic(path: Path, write: Any) -> None:
    """Write a file through a temporary sibling and a rename: readers see the old file or the whole new one."""
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    text = json.dumps(plain(summary), indent=2, allow_nan=False) + "\n"
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
    stay readable, and the error propagates.
    """
    run_id = run_id_for(scenario)
    run_dir = Path(out_dir) if out_dir is not None else DEFAULT_RUNS_DIR / run_id
    check_output_dir(run_dir.resolve())  # before any engine starts; RunRecorder.start checks again
    recorder = RunRecorder(store, run_dir.resolve(), run_id=run_id)
    run_scenario(scenario, recorder, on_round=on_round)
    return recorder


def versions() -> dict[str, str]:
    import flwr

    return {"term-fl": term_fl.__version__, "flwr": flwr.__version__, "torch": torch.__version__, "numpy": np.__version__}


def git_commit() -> str | None:
    """The commit of the term-fl checkout, when it runs from one."""
    root = Path(term_fl.__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def build_summary(
    scenario: Scenario,
    *,
    run_id: str,
    status: str,
    rounds_completed: int,
    last: RoundRecord | None,
    data: dict[str, Any],
    wall_time_s: float,
    error: str | None = None,
    last_evaluated: RoundRecord | None = None,
    validation_means: Sequence[tuple[int, float]] = (),
) -> dict[str, Any]:
    """summary.json of a run (docs/contracts.md, 'summary.json').

    The statistics are those of the last evaluated round (``last_evaluated``,
    default ``last``; a finished run always evaluates its last round);
    ``validation_means`` are the (round, validation device mean) pairs of the
    evaluated rounds, for ``convergence``.
    """
    evaluated = last_evaluated if last_evaluated is not None else last
    summary: dict[str, Any] = {
        "run_id": run_id,
        "name": scenario.run_name,
        "status": status,
        "scenario": scenario.name,
        "engine": scenario.run.engine,
        "executor": executor_of(scenario),
        "strategy": {"name": scenario.strategy.name, **scenario.strategy_params()},
        "seed": scenario.run.seed,
        "rounds_planned": scenario.run.rounds,
        "rounds_completed": rounds_completed,
        "evaluated_round": evaluated.server_round if evaluated else None,
        "config_hash": config_hash(scenario),
        "reference_hash": baseline_hash(scenario),
    }
    for split, key in SUMMARY_NAMES.items():
        summary[key] = (evaluated.stats.get(split) if evaluated else None) or None
    if evaluated is not None:
        summary["worst_10_devices"] = {key: worst_devices(evaluated.eval_rows, split)
                                       for split, key in SUMMARY_NAMES.items()}
    noisy = set((data.get("noise") or {}).get("devices") or [])
    if noisy and evaluated is not None:
        for split, key in SUMMARY_NAMES.items():
            summary[f"{key}_clean"] = clean_device_statistics(evaluated.eval_rows, noisy, split)
    if validation_means:
        rounds, values = zip(*validation_means, strict=True)
        change = last_fifth_change(rounds, values, scenario.run.rounds)
        summary["convergence"] = {
            "statistic": "validation device mean",
            "last_fifth_change": change,
            "flat": None if change is None else abs(change) <= FLAT,
        }
    if last is not None:
        summary["tilted_weights"] = {str(k): v for k, v in sorted(last.tilted_weights.items())}
        summary.update(last.diagnostics)
    summary.update(
        versions=versions(), git_commit=git_commit(), data=data, wall_time_s=round(wall_time_s, 3)
    )
    if error:
        summary["error"] = error
    return summary


def worst_devices(eval_rows: list[dict[str, Any]], split: str) -> list[dict[str, Any]]:
    """The devices that make up a split's worst 10%, with their accuracy and number of samples.

    A worst 10% of devices that hold one or two test samples moves by 0.5 with
    one prediction: the sizes say how much one number can be trusted.
    """
    rows = sorted((r for r in eval_rows if r["split"] == split), key=lambda r: r["partition_id"])
    if not rows:
        return []
    chosen = worst_10_devices(np.array([r["accuracy"] for r in rows]))
    return [{"partition_id": rows[i]["partition_id"], "accuracy": rows[i]["accuracy"], "examples": rows[i]["examples"]}
            for i in chosen]


def clean_device_statistics(
    eval_rows: list[dict[str, Any]], noisy: set[int], split: str = TEST
) -> dict[str, Any] | None:
    """Fairness statistics of a split over the devices whose data was not corrupted."""
    rows = [r for r in eval_rows if r["split"] == split and r["partition_id"] not in noisy]
    if not rows:
        return None
    return fairness_summary(
        np.array([r["accuracy"] for r in rows]),
        num_examples=np.array([r["examples"] for r in rows]),
        correct=np.array([r["correct"] for r in rows]),
    )


def data_record(scenario: Scenario, metadata: dict[str, Any]) -> dict[str, Any]:
    record = {"name": scenario.data.name, "path": metadata.get("path"), "sha256": metadata.get("sha256")}
    if metadata.get("noise"):
        record["noise"] = metadata["noise"]
    return record


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
    """Writes one run to its directory and to the results store."""

    def __init__(self, store: ResultsStore, run_dir: Path, *, run_id: str | None = None) -> None:
        self.store = store
        self.run_dir = Path(run_dir)
        self.run_id = run_id
        self.summary: dict[str, Any] | None = None
        self._scenario: Scenario | None = None
        self._data: dict[str, Any] = {}
        self._start = time.perf_counter()
        self._last: RoundRecord | None = None
        self._last_evaluated: RoundRecord | None = None
        self._validation_means: list[tuple[int, float]] = []
        self._completed = 0
        self._heartbeat: Heartbeat | None = None

    def start(self, scenario: Scenario, dataset_metadata: dict[str, Any]) -> None:
        self._scenario = scenario
        self._start = time.perf_counter()
        self._data = data_record(scenario, dataset_metadata)
        check_output_dir(self.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
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
        self._heartbeat = Heartbeat(self.store, self.run_id)

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

    def finish(self, status: str, result: FederationResult | None, error: str | None = None) -> None:
        assert self._scenario is not None and self.run_id is not None
        if self._heartbeat is not None:
            self._heartbeat.stop()
        if result is not None:
            write_atomic(self.run_dir / "model.pt", lambda p: save_model(p, result))
        self.summary = build_summary(
            self._scenario,
            run_id=self.run_id,
            status=status,
            rounds_completed=self._completed,
            last=self._last,
            last_evaluated=self._last_evaluated,
            validation_means=self._validation_means,
            data=self._data,
            wall_time_s=time.perf_counter() - self._start,
            error=error,
        )
        # The store row first, then summary.json (atomically): a crash between
        # the two leaves a finished row without summary.json, which the sweep
        # rewrites from the row (term_fl.cli.sweep.finished_summary), never a
        # finished summary.json beside a row that says otherwise.
        self.store.finish_run(self.run_id, status, summary=self.summary, error=error)
        write_summary(self.run_dir, self.summary)


def save_model(path: Path, result: FederationResult) -> None:
    state = {k: torch.from_numpy(np.array(v.numpy(), copy=True)) for k, v in result.arrays.items()}
    torch.save(state, path)


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
