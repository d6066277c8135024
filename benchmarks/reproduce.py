"""Reproduction check: short runs of every released scenario, every stored number dumped exactly.

    python benchmarks/reproduce.py run --out DUMP.json [--rounds 20] [--only LABEL,...] [--executors E,...]
    python benchmarks/reproduce.py compare BEFORE.json AFTER.json

``run`` runs short versions of the released scenario files (the embedded
default, configs/fairness.toml's base run and one cell per strategy,
configs/vehicle-sensor.toml, configs/noisy-sensors.toml, and the template's
defences and server learning rate on the default) on the in-process engine
with both executors (``--executors`` names others, e.g. ``compiled``), plus
one run on Flower's Simulation Engine, each into a fresh results store, and
writes every stored per-device row (device_train,
device_eval), every round's statistics and diagnostics, summary.json and the
final model, with each float written exactly (``float.hex``). ``compare``
says, case by case, whether two dumps hold the same numbers bit for bit, and
where they first differ.

The script imports term-fl from wherever Python finds it, so the same file
checks two checkouts: ``PYTHONPATH=/path/to/other/checkout python
benchmarks/reproduce.py run --out before.json``, then ``run`` in this
checkout and ``compare``. The dump names the term_fl package and the commit it
ran from. Scenario files are read from this script's repository (the
released files are the same in both checkouts unless a change touches them).
Times, run ids, versions and paths are left out: they differ run to run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"
DEFAULT = None  # the embedded default scenario (term_fl/scenarios/default.toml)
EXECUTORS = ("sequential", "cohort")

# (label, scenario file, overrides): every strategy of today's files, on each file's settings.
CASES: list[tuple[str, Path | None, dict[str, Any]]] = [
    ("default", DEFAULT, {}),
    ("default-fedavg", DEFAULT, {"strategy.name": "fedavg"}),
    ("default-qffl", DEFAULT, {"strategy.name": "qffl"}),
    ("default-afl", DEFAULT, {"strategy.name": "afl", "strategy.lambda_lr": 0.5}),
    ("default-term-defences", DEFAULT, {"strategy.clip_loss": 1.5, "strategy.max_update_norm": 1.2}),
    ("default-qffl-max-update-norm", DEFAULT, {"strategy.name": "qffl", "strategy.max_update_norm": 1.2}),
    ("default-term-server-lr", DEFAULT, {"strategy.server_lr": 0.1, "strategy.lam": 0.5}),
    ("fairness", CONFIGS / "fairness.toml", {}),
    ("fairness-fedavg", CONFIGS / "fairness.toml", {"strategy.name": "fedavg"}),
    ("fairness-qffl", CONFIGS / "fairness.toml", {"strategy.name": "qffl", "strategy.q": 5.0}),
    ("fairness-term", CONFIGS / "fairness.toml", {"strategy.t": 10.0}),
    ("vehicle", CONFIGS / "vehicle-sensor.toml", {}),
    ("vehicle-fedavg", CONFIGS / "vehicle-sensor.toml", {"strategy.name": "fedavg"}),
    ("vehicle-qffl", CONFIGS / "vehicle-sensor.toml", {"strategy.name": "qffl"}),
    ("vehicle-term-sum", CONFIGS / "vehicle-sensor.toml", {"strategy.loss_reduction": "sum", "strategy.t": 0.005}),
    ("vehicle-qffl-sum", CONFIGS / "vehicle-sensor.toml",
     {"strategy.name": "qffl", "strategy.loss_reduction": "sum", "strategy.q": 0.1}),
    ("noisy", CONFIGS / "noisy-sensors.toml", {}),
    ("noisy-fedavg", CONFIGS / "noisy-sensors.toml", {"strategy.name": "fedavg", "client.tau": 0.0}),
    ("noisy-hierarchical", CONFIGS / "noisy-sensors.toml", {"client.tau": -1.0}),
]
FLOWER_CASE = ("default-flower", DEFAULT, {"run.engine": "flower", "run.executor": "sequential"})
FLOWER_ROUNDS = 5  # Ray is slow to start and each round crosses it: a short run is enough to compare

SUMMARY_VOLATILE = ("run_id", "wall_time_s", "versions", "git_commit")
ROUND_VOLATILE = ("run_id", "duration_s")


def exact(value: Any) -> Any:
    """``value`` with every float as its exact hex form (NaN and infinities included), recursively."""
    if isinstance(value, float):
        return value.hex() if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        return {str(k): exact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [exact(v) for v in value]
    return value


def _rows(db: Path, table: str, order: str, drop: tuple[str, ...] = ("run_id",)) -> list[dict[str, Any]]:
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        rows = conn.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchall()  # noqa: S608 (fixed names)
    out = []
    for row in rows:
        item = {k: row[k] for k in row.keys() if k not in drop}
        for key in [k for k in item if k.endswith("_json")]:
            item[key] = json.loads(item[key]) if item[key] is not None else None
        out.append(exact(item))
    return out


def _model(path: Path) -> dict[str, str]:
    import torch

    state = torch.load(path, weights_only=True)
    return {k: f"{v.dtype}{tuple(v.shape)}:{hashlib.sha256(v.numpy().tobytes()).hexdigest()}" for k, v in state.items()}


def run_case(scenario: Any, work: Path) -> dict[str, Any]:
    """Run one scenario into a fresh store under ``work``; every stored number, exactly."""
    from term_fl.results import ResultsStore
    from term_fl.runs.run import run_one

    db, run_dir = work / "results.db", work / "run"
    with ResultsStore(db) as store:
        run_one(scenario, store, out_dir=run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    for key in SUMMARY_VOLATILE:
        summary.pop(key, None)
    summary.get("data", {}).pop("path", None)
    return {
        "summary": exact(summary),
        "rounds": _rows(db, "rounds", "round", ROUND_VOLATILE),
        "device_train": _rows(db, "device_train", "round, partition_id"),
        "device_eval": _rows(db, "device_eval", "round, split, partition_id"),
        "round_stats": _rows(db, "round_stats", "round, split"),
        "model": _model(run_dir / "model.pt"),
    }


def _cases(rounds: int, only: set[str], executors: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
    from term_fl.config import load_scenario

    for label, path, overrides in CASES:
        for executor in executors:
            name = f"{label}/{executor}"
            if not only or label in only or name in only:
                yield name, load_scenario(path, {**overrides, "run.rounds": rounds, "run.reference": "none",
                                                 "run.engine": "inprocess", "run.executor": executor})
    label, path, overrides = FLOWER_CASE
    if not only or label in only:
        yield label, load_scenario(path, {**overrides, "run.rounds": FLOWER_ROUNDS, "run.reference": "none"})


def run(out: Path, rounds: int, only: set[str], executors: tuple[str, ...] = EXECUTORS) -> None:
    """Run every case and write the dump."""
    import logging

    import term_fl
    from term_fl.runs.run import git_commit

    logging.getLogger("flwr").setLevel(logging.WARNING)  # a line per reply otherwise

    dump: dict[str, Any] = {"term_fl": str(Path(term_fl.__file__).parent), "commit": git_commit(), "cases": {}}
    with tempfile.TemporaryDirectory(prefix="term-fl-reproduce-") as tmp:
        for name, scenario in _cases(rounds, only, executors):
            start = time.perf_counter()
            dump["cases"][name] = run_case(scenario, Path(tmp) / name.replace("/", "-"))
            print(f"{name}: {time.perf_counter() - start:.1f} s", flush=True)
    out.write_text(json.dumps(dump, indent=1, sort_keys=True) + "\n")
    print(f"{len(dump['cases'])} cases from {dump['term_fl']} (commit {dump['commit']}) -> {out}")


def first_difference(a: Any, b: Any, where: str = "") -> str | None:
    """Where two dumped values first differ (None when equal)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                return f"{where}.{key}: only in {'after' if key not in a else 'before'}"
            found = first_difference(a[key], b[key], f"{where}.{key}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} rows before, {len(b)} after"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, f"{where}[{i}]")
            if found:
                return found
        return None
    return None if a == b else f"{where}: {a!r} before, {b!r} after"


def compare(before: Path, after: Path) -> int:
    """Print one line per case; the number of cases that differ or are missing."""
    a, b = json.loads(before.read_text()), json.loads(after.read_text())
    print(f"before: {a['term_fl']} (commit {a['commit']})\nafter:  {b['term_fl']} (commit {b['commit']})")
    bad = 0
    for name in sorted(set(a["cases"]) | set(b["cases"])):
        if name not in a["cases"] or name not in b["cases"]:
            bad += 1
            print(f"MISSING  {name}: only {'after' if name not in a['cases'] else 'before'}")
            continue
        case = b["cases"][name]
        found = first_difference(a["cases"][name], case)
        rows = sum(len(case[t]) for t in ("device_train", "device_eval", "round_stats", "rounds"))
        verdict = f"DIFFERS  {name}: {rows} rows; first at {found}" if found else f"same     {name}: {rows} rows"
        print(verdict + ", summary.json and the final model compared")
        bad += bool(found)
    print(f"{bad} of {len(set(a['cases']) | set(b['cases']))} cases differ or are missing")
    return bad


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="run every case and write the dump")
    run_parser.add_argument("--out", type=Path, required=True)
    run_parser.add_argument("--rounds", type=int, default=20)
    run_parser.add_argument("--only", default="", help="comma-separated case labels (e.g. default,vehicle/cohort)")
    run_parser.add_argument("--executors", default=",".join(EXECUTORS),
                            help="comma-separated in-process executors (default: sequential,cohort; e.g. compiled)")
    compare_parser = commands.add_parser("compare", help="compare two dumps bit for bit")
    compare_parser.add_argument("before", type=Path)
    compare_parser.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    if args.command == "run":
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
        os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
        executors = tuple(e.strip() for e in args.executors.split(",") if e.strip())
        run(args.out, args.rounds, {s.strip() for s in args.only.split(",") if s.strip()}, executors)
        return 0
    return 1 if compare(args.before, args.after) else 0


if __name__ == "__main__":
    sys.exit(main())
