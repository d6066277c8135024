"""How the dashboard, ``term-fl runs`` and ``term-fl report`` scale with the results store's history.

Builds results stores through the store's own API (``create_run``,
``record_round``, ``finish_run``) and times what a user waits for:

- the runs page (``GET /``) and ``GET /api/runs``;
- a comparison (``GET /api/compare?runs=...`` of a fixed set of runs, and the
  comparison page of the same runs);
- ``term-fl runs`` as a user types it (a child process: Python start-up and
  imports included);
- ``term-fl report SCENARIO`` of a scenario of fixed size.

Two axes, each a pair of stores that differ in one thing only:

- *history*: 50 vs 500 runs of 60 rounds x 100 devices. A scenario of 50
  runs (the "sweep": 10 cells x 5 seeds) is in both stores; the 500-run
  store adds 450 runs of other scenarios. The report and the comparison
  look at the sweep only, so their cost should not grow with the history;
  the list views show the newest page of runs.
- *rounds*: 100 runs with 6 vs 60 rounds of 100 devices each; the
  comparison is of all 100 runs.

    python -m benchmarks.dashboard_bench [small|full]

Nothing asserts anything about time; ``python -m benchmarks`` prints the
ratios against the targets (history <= 2x, rounds <= 1.5x).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from term_fl.keys import EVAL_SPLITS as SPLITS
from term_fl.results import EvalRow, ResultsStore, TrainRow

SWEEP = "bench-sweep"
ROUNDS_SCENARIO = "bench-rounds"
# A sweep's cells: (strategy, parameters); 10 cells.
CELLS = [("fedavg", {})] + [("qffl", {"q": q}) for q in (1.0, 5.0)] + [
    ("term", {"t": t, "lam": 1.0}) for t in (0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0)
]
SEEDS = (0, 1, 2, 3, 4)
# Loss risks are a numerical search each: one template, jittered per round.
RISKS = {"alpha": 0.1, "var": 1.2, "cvar": 1.5, "evar": 1.9, "evar_t": 2.3, "tivar": 1.4, "tivar_t": 3.1}


@dataclass(frozen=True)
class Sizes:
    """What one size of the benchmark builds."""

    devices: int
    rounds: int  # rounds of the history stores and of the long rounds store
    short_rounds: int
    history_small: int  # runs in the small history store (the sweep)
    history_large: int
    rounds_runs: int  # runs in each rounds store
    repeats: int


SIZES = {
    "small": Sizes(devices=10, rounds=20, short_rounds=2, history_small=20, history_large=100,
                   rounds_runs=20, repeats=2),
    "full": Sizes(devices=100, rounds=60, short_rounds=6, history_small=50, history_large=500,
                  rounds_runs=100, repeats=3),
}  # fmt: skip


def _stats(accuracy: np.ndarray, examples: np.ndarray, rng: np.random.Generator) -> dict[str, float]:
    """Fairness statistics of one split (computed as term_fl.fairness does) and jittered loss risks."""
    from term_fl.fairness import fairness_summary

    correct = np.round(accuracy * examples).astype(np.int64)
    stats = fairness_summary(correct / examples, num_examples=examples, correct=correct)
    stats.update({k: v * (1 + 0.05 * rng.standard_normal()) if k != "alpha" else v for k, v in RISKS.items()})
    return stats


def _record_run(
    store: ResultsStore, *, scenario: str, strategy: str, params: dict[str, Any], seed: int, rounds: int,
    devices: int, index: int,
) -> str:  # fmt: skip
    rng = np.random.default_rng([index, seed])
    params = {**params, "tau": 0.0}
    label = " ".join([strategy, *(f"{k}={v:g}" for k, v in params.items() if k in ("t", "q"))])
    run_id = store.create_run(
        run_id=f"{index:06d}-{scenario}-{strategy}-s{seed}",
        name=f"{scenario} {label} seed {seed}",
        scenario=scenario, engine="inprocess", strategy=strategy, strategy_params=params, seed=seed,
        config_hash=f"{scenario}-{label}-{rounds}",
        config={"name": scenario, "strategy": {"name": strategy, **params}, "run": {"rounds": rounds, "seed": seed}},
        data={"name": "synthetic", "path": None, "sha256": None}, rounds_planned=rounds,
    )  # fmt: skip
    difficulty = rng.uniform(0.0, 0.5, devices)
    examples = rng.integers(10, 400, devices)
    sampled = max(1, devices // 10)
    for r in range(1, rounds + 1):
        progress = 1 - np.exp(-3 * r / rounds)
        eval_rows, stats = [], {}
        for split in SPLITS:
            accuracy = np.clip(0.5 + (0.45 - difficulty) * progress + rng.normal(0, 0.03, devices), 0, 1)
            loss = -np.log(np.maximum(accuracy, 0.01))
            stats[split] = _stats(accuracy, examples, rng)
            eval_rows += [
                EvalRow(k, split, float(loss[k]), float(accuracy[k]), int(round(accuracy[k] * examples[k])),
                        int(examples[k]))
                for k in range(devices)
            ]  # fmt: skip
        chosen = np.sort(rng.choice(devices, sampled, replace=False))
        weights = rng.dirichlet(np.ones(sampled))
        train_rows = [
            TrainRow(int(k), True, True, float(difficulty[k] + 0.1), float(difficulty[k]), float(w), int(examples[k]))
            for k, w in zip(chosen, weights, strict=True)
        ]
        store.record_round(run_id, r, train_rows=train_rows, eval_rows=eval_rows, stats=stats, duration_s=0.01)
    store.finish_run(run_id, "finished", summary={"run_id": run_id, **{s: stats[s] for s in SPLITS}})
    return run_id


def build_store(path: Path, *, scenario: str, runs: int, rounds: int, devices: int, first_index: int = 0) -> list[str]:
    """Record ``runs`` runs of ``scenario`` (cells x seeds, in order), appending to the store at ``path``."""
    ids = []
    with ResultsStore(path) as store:
        for i in range(runs):
            (strategy, params), seed = CELLS[(i // len(SEEDS)) % len(CELLS)], SEEDS[i % len(SEEDS)]
            ids.append(_record_run(store, scenario=scenario, strategy=strategy, params=params, seed=seed,
                                   rounds=rounds, devices=devices, index=first_index + i))  # fmt: skip
    return ids


def _timed(fn: Callable[[], Any], repeats: int, budget_s: float = 3.0) -> dict[str, Any]:
    """Median and every time of at least ``repeats`` calls after one warm-up call; a fast view is
    called again until ``budget_s`` seconds are spent (at most 25 times), so that its median is not
    one unlucky millisecond on a shared machine."""
    fn()
    times: list[float] = []
    while len(times) < repeats or (sum(times) < budget_s and len(times) < 25):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return {"median_s": statistics.median(times), "times_s": times}


def measure(db: Path, *, compare_ids: list[str], scenario: str, repeats: int, work: Path) -> dict[str, Any]:
    """Time every view of the store at ``db``."""
    from fastapi.testclient import TestClient

    from term_fl.dashboard import create_app, write_report

    results: dict[str, Any] = {}
    ids = ",".join(compare_ids)
    with TestClient(create_app(db)) as client:

        def get(url: str) -> Callable[[], None]:
            def call() -> None:
                response = client.get(url)
                if response.status_code != 200:
                    raise RuntimeError(f"GET {url[:80]} answered {response.status_code}: {response.text[:300]}")

            return call

        results["runs_page"] = _timed(get("/"), repeats)
        results["api_runs"] = _timed(get("/api/runs"), repeats)
        results["api_compare"] = _timed(get(f"/api/compare?runs={ids}"), repeats)
        results["compare_page"] = _timed(get(f"/compare?runs={ids}"), repeats)
    env = {**os.environ, "COLUMNS": "120", "TERM_FL_DB": str(db)}

    def cli() -> None:
        subprocess.run([sys.executable, "-m", "term_fl", "runs", "--db", str(db)], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600)  # fmt: skip

    results["cli_runs"] = _timed(cli, repeats)
    out = work / "report.html"
    results["report"] = _timed(lambda: write_report(db, scenario, out), repeats)
    results["report"]["bytes"] = out.stat().st_size
    results["compared_runs"] = len(compare_ids)
    return results


VIEWS = {
    "runs_page": "runs page (GET /)",
    "api_runs": "GET /api/runs",
    "api_compare": "comparison (GET /api/compare)",
    "compare_page": "comparison page (GET /compare)",
    "cli_runs": "term-fl runs (child process)",
    "report": "term-fl report SCENARIO",
}


def bench_dashboard(size: str = "small", work_dir: Path | None = None) -> dict[str, Any]:
    """Build the four stores of ``size`` in ``work_dir`` and time every view of each."""
    s = SIZES[size]
    work = Path(work_dir or os.environ.get("TMPDIR", "/tmp")) / "dashboard-bench"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    raw: dict[str, Any] = {"sizes": s.__dict__, "build_s": {}, "stores": {}}
    small, large = work / "history-small.db", work / "history-large.db"
    start = time.perf_counter()
    sweep_ids = build_store(small, scenario=SWEEP, runs=s.history_small, rounds=s.rounds, devices=s.devices)
    raw["build_s"]["history_small"] = time.perf_counter() - start
    start = time.perf_counter()
    shutil.copyfile(small, large)  # the same sweep, then 450 runs of other scenarios (older ids, newer starts)
    others = s.history_large - s.history_small
    per_scenario = 50
    for i in range(0, others, per_scenario):
        build_store(large, scenario=f"history-{i // per_scenario}", runs=min(per_scenario, others - i),
                    rounds=s.rounds, devices=s.devices, first_index=s.history_small + i)  # fmt: skip
    raw["build_s"]["history_large"] = time.perf_counter() - start
    short, long = work / "rounds-short.db", work / "rounds-long.db"
    start = time.perf_counter()
    short_ids = build_store(short, scenario=ROUNDS_SCENARIO, runs=s.rounds_runs, rounds=s.short_rounds,
                            devices=s.devices)  # fmt: skip
    long_ids = build_store(long, scenario=ROUNDS_SCENARIO, runs=s.rounds_runs, rounds=s.rounds, devices=s.devices)
    raw["build_s"]["rounds"] = time.perf_counter() - start
    plan = {
        "history_small": (small, sweep_ids, SWEEP, s.history_small, s.rounds),
        "history_large": (large, sweep_ids, SWEEP, s.history_large, s.rounds),
        "rounds_short": (short, short_ids, ROUNDS_SCENARIO, s.rounds_runs, s.short_rounds),
        "rounds_long": (long, long_ids, ROUNDS_SCENARIO, s.rounds_runs, s.rounds),
    }
    for key, (db, ids, scenario, runs, rounds) in plan.items():
        raw["stores"][key] = {
            "runs": runs, "rounds": rounds, "devices": s.devices, "db_bytes": db.stat().st_size,
            **measure(db, compare_ids=ids, scenario=scenario, repeats=s.repeats, work=work),
        }  # fmt: skip
    shutil.rmtree(work, ignore_errors=True)
    return raw


if __name__ == "__main__":
    raw = bench_dashboard(sys.argv[1] if len(sys.argv) > 1 else "small")
    for key, store in raw["stores"].items():
        print(f"{key}: {store['runs']} runs x {store['rounds']} rounds x {store['devices']} devices")
        for view, label in VIEWS.items():
            print(f"  {label:40s} {store[view]['median_s']:.3f} s")
    print("build:", {k: round(v, 1) for k, v in raw["build_s"].items()})
