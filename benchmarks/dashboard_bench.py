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

from term_fl.common.keys import EVAL_SPLITS as SPLITS
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
    # small: the sweep is 50 runs as in full, so that the runs page and /api/runs show a full page of 50
    # in both history stores (with 20 runs the small store's page held 20 rows, the large one's 50)
    "small": Sizes(devices=10, rounds=20, short_rounds=2, history_small=50, history_large=150,
                   rounds_runs=20, repeats=2),
    "full": Sizes(devices=100, rounds=60, short_rounds=6, history_small=50, history_large=500,
                  rounds_runs=100, repeats=3),
}  # fmt: skip


def _stats(accuracy: np.ndarray, examples: np.ndarray, rng: np.random.Generator) -> dict[str, float]:
    """Fairness statistics of one split (computed as term_fl.maths.fairness does) and jittered loss risks."""
    from term_fl.maths.fairness import fairness_summary

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


def _timed_pair(calls: dict[str, Callable[[], Any]], repeats: int, budget_s: float = 6.0) -> dict[str, dict[str, Any]]:
    """Median and every time of the calls of a pair of stores, taken in turns after one warm-up call each.

    Turns, so that a burst of load on the shared machine falls on both stores
    of a pair and not on one of them (the ratio is the point); a fast view is
    called again until ``budget_s`` seconds are spent (at most 25 turns), so
    that its median is not one unlucky millisecond.
    """
    for call in calls.values():
        call()
    times: dict[str, list[float]] = {key: [] for key in calls}
    turns = 0
    while turns < repeats or (sum(map(sum, times.values())) < budget_s and turns < 25):
        for key, call in calls.items():
            start = time.perf_counter()
            call()
            times[key].append(time.perf_counter() - start)
        turns += 1
    return {key: {"median_s": statistics.median(t), "times_s": t} for key, t in times.items()}


def measure_pair(stores: dict[str, tuple[Path, list[str], str]], *, repeats: int, work: Path) -> dict[str, dict[str, Any]]:
    """Time every view of a pair of stores, key -> (path, the runs compared, the scenario reported), in turns."""
    from fastapi.testclient import TestClient

    from term_fl.dashboard import create_app, write_report

    results: dict[str, dict[str, Any]] = {key: {} for key in stores}
    clients = {key: TestClient(create_app(db)) for key, (db, _, _) in stores.items()}
    try:
        for client in clients.values():
            client.__enter__()

        def get(view: str, url: str) -> dict[str, Callable[[], None]]:
            def call(key: str) -> Callable[[], None]:
                target = url.format(ids=",".join(stores[key][1]))

                def one() -> None:
                    response = clients[key].get(target)
                    if response.status_code != 200:
                        raise RuntimeError(f"GET {target[:80]} answered {response.status_code}: {response.text[:300]}")

                return one

            return {key: call(key) for key in stores}

        for view, url in (("runs_page", "/"), ("api_runs", "/api/runs"), ("api_compare", "/api/compare?runs={ids}"),
                          ("compare_page", "/compare?runs={ids}")):  # fmt: skip
            for key, timing in _timed_pair(get(view, url), repeats).items():
                results[key][view] = timing
    finally:
        for client in clients.values():
            client.__exit__(None, None, None)

    def cli(db: Path) -> Callable[[], None]:
        env = {**os.environ, "COLUMNS": "120", "TERM_FL_DB": str(db)}
        return lambda: subprocess.run([sys.executable, "-m", "term_fl", "runs", "--db", str(db)], env=env, check=True,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600)  # fmt: skip

    for key, timing in _timed_pair({key: cli(db) for key, (db, _, _) in stores.items()}, repeats).items():
        results[key]["cli_runs"] = timing
    outs = {key: work / f"report-{key}.html" for key in stores}

    def report(key: str) -> Callable[[], None]:
        return lambda: write_report(stores[key][0], stores[key][2], outs[key])

    for key, timing in _timed_pair({key: report(key) for key in stores}, repeats).items():
        results[key]["report"] = {**timing, "bytes": outs[key].stat().st_size}
    for key, (_, ids, _) in stores.items():
        results[key]["compared_runs"] = len(ids)
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
    for pair in (("history_small", "history_large"), ("rounds_short", "rounds_long")):
        timings = measure_pair({key: plan[key][:3] for key in pair}, repeats=s.repeats, work=work)
        for key in pair:
            db, _, _, runs, rounds = plan[key]
            raw["stores"][key] = {"runs": runs, "rounds": rounds, "devices": s.devices, "db_bytes": db.stat().st_size,
                                  **timings[key]}  # fmt: skip
    shutil.rmtree(work, ignore_errors=True)
    return raw


if __name__ == "__main__":
    raw = bench_dashboard(sys.argv[1] if len(sys.argv) > 1 else "small")
    for key, store in raw["stores"].items():
        print(f"{key}: {store['runs']} runs x {store['rounds']} rounds x {store['devices']} devices")
        for view, label in VIEWS.items():
            print(f"  {label:40s} {store[view]['median_s']:.3f} s")
    print("build:", {k: round(v, 1) for k, v in raw["build_s"].items()})
