"""Benchmark 2: the vehicle-sensor table end to end, in-process engine and Flower engine.

3 strategies (fedavg, qffl q=5, term t>0) x 5 seeds at the scenario's default
settings (configs/vehicle-sensor.toml when it exists, else the embedded
defaults with data.name=vehicle, model.name=linear_svm, fractions
0.5/0.2/0.3), each run through ``term_fl.runs.run.run_one`` into a temporary
results store and run directories. Reported: total wall time, and the time
scaled linearly to 30 rounds per run (target: <= 15 s for the in-process
engine). The Flower engine runs the same table inside one ``ray_session``
(Ray starts once; its start-up and shutdown are reported separately).
--size small: 1 seed, 2 rounds.
"""

from __future__ import annotations

import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

from term_fl.config import Scenario, with_overrides
from term_fl.engines.flower import ray_session
from term_fl.results import ResultsStore
from term_fl.runs.run import run_one

from .common import VEHICLE_CONFIG, BenchResult, Options, Row, fmt_s, median, verdict, vehicle_scenario

NAME = "vehicle_table"
TARGET_S = 15.0  # whole table, 30 rounds per run
SCALE_ROUNDS = 30
QFFL_Q = 5.0
DEFAULT_SEEDS = [0, 1, 2, 3, 4]
# The Flower engine runs each cell for at most this many rounds (its rounds cost ~0.5 s and every
# run restarts the actors: the default 100 rounds x 15 runs would take ~15 minutes on 2 cores).
FLOWER_MAX_ROUNDS = 30


def _config_sweep() -> dict[str, Any]:
    if not VEHICLE_CONFIG.is_file():
        return {}
    try:
        return tomllib.loads(VEHICLE_CONFIG.read_text(encoding="utf-8")).get("sweep", {}) or {}
    except (OSError, tomllib.TOMLDecodeError):
        return {}


def table_cells(base: Scenario, size: str) -> list[Scenario]:
    """The 3 x 5 runs of the table (3 x 1 with --size small), in a stable order."""
    sweep = _config_sweep()
    seeds = [int(s) for s in sweep.get("run.seed", DEFAULT_SEEDS)][:5] or DEFAULT_SEEDS
    t = base.strategy.term.t if base.strategy.name == "term" and base.strategy.term.t > 0 else None
    if t is None:
        t = next((float(v) for v in sweep.get("strategy.t", []) if float(v) > 0), 1.0)
    if size == "small":
        seeds = seeds[:1]
    variants = [
        {"strategy.name": "fedavg"},
        {"strategy.name": "qffl", "strategy.q": QFFL_Q},
        {"strategy.name": "term", "strategy.t": t},
    ]
    rounds = {"run.rounds": 2} if size == "small" else {}
    return [with_overrides(base, {**v, "run.seed": s, **rounds}) for v in variants for s in seeds]


def _run_table(cells: list[Scenario], engine: str, tmp: Path, max_rounds: int | None = None) -> dict[str, Any]:
    runs = []
    with ResultsStore(tmp / f"results-{engine}.db") as store:
        start = time.perf_counter()
        for i, cell in enumerate(cells):
            overrides: dict[str, Any] = {"run.engine": engine}
            if max_rounds is not None and cell.run.rounds > max_rounds:
                overrides["run.rounds"] = max_rounds
            scenario = with_overrides(cell, overrides)
            round_s: list[float] = []
            t0 = time.perf_counter()
            recorder = run_one(scenario, store, out_dir=tmp / "runs" / f"{engine}-{i}",
                               on_round=lambda record, total, acc=round_s: acc.append(record.duration_s))
            wall = time.perf_counter() - t0
            runs.append(
                {
                    "strategy": scenario.strategy.name,
                    "seed": scenario.run.seed,
                    "rounds": scenario.run.rounds,
                    "wall_s": wall,
                    "round_s": round_s,
                    "overhead_s": wall - sum(round_s),  # everything outside the rounds: start-up, records, model
                    "status": store.get_run(recorder.run_id).status,
                }
            )
        total = time.perf_counter() - start
    rounds = sum(r["rounds"] for r in runs)
    all_rounds = [d for r in runs for d in r["round_s"]]
    overhead = [r["overhead_s"] for r in runs]
    return {
        "runs": runs,
        "total_s": total,
        "total_rounds": rounds,
        # as asked: the whole table's time scaled linearly to 30 rounds per run
        "scaled_30_rounds_s": total * SCALE_ROUNDS * len(runs) / rounds,
        # the same projection keeping the per-run overhead fixed: sum(overhead) + runs x 30 x median round
        "projected_30_rounds_s": sum(overhead) + len(runs) * SCALE_ROUNDS * median(all_rounds),
        "per_round_s": total / rounds,
        "round_median_s": median(all_rounds),
        "overhead_median_s": median(overhead),
        "first_run_overhead_s": overhead[0],
    }


def run(opts: Options) -> BenchResult:
    base, source = vehicle_scenario(opts)
    cells = table_cells(base, opts.size)
    result = BenchResult(NAME)
    with tempfile.TemporaryDirectory(prefix="tfl-bench-table-", dir=opts.work_dir) as tmp_name:
        tmp = Path(tmp_name)
        inproc = _run_table(cells, "inprocess", tmp)
        t0 = time.perf_counter()
        session = ray_session(with_overrides(base, {"run.engine": "flower"}))
        session.__enter__()
        ray_start = time.perf_counter() - t0
        try:
            flower = _run_table(cells, "flower", tmp, max_rounds=FLOWER_MAX_ROUNDS)
        finally:
            t1 = time.perf_counter()
            session.__exit__(None, None, None)
            ray_stop = time.perf_counter() - t1
    flower.update(ray_start_s=ray_start, ray_shutdown_s=ray_stop,
                  total_with_ray_s=flower["total_s"] + ray_start + ray_stop)
    rounds_per_run = cells[0].run.rounds
    result.raw = {
        "scenario": {"name": base.name, **source, "model": base.model.name, "rounds_per_run": rounds_per_run,
                     "runs": len(cells), "seeds": sorted({c.run.seed for c in cells}),
                     "strategies": [{"name": c.strategy.name, **c.strategy_params()} for c in cells[:: max(1, len(cells) // 3)]]},
        "inprocess": inproc,
        "flower": flower,
        # both scaled to 30 rounds per run (the engines may have run different numbers of rounds)
        "flower_over_inprocess": flower["scaled_30_rounds_s"] / inproc["scaled_30_rounds_s"],
        "target_s_for_30_rounds": TARGET_S,
    }
    n = len(cells)
    result.rows.append(
        Row(
            f"{NAME} inprocess ({n} runs x {rounds_per_run} rounds)",
            f"{fmt_s(inproc['total_s'])} total; {fmt_s(inproc['scaled_30_rounds_s'])} @30 rounds/run "
            f"(round {fmt_s(inproc['round_median_s'])}, per-run overhead {fmt_s(inproc['overhead_median_s'])})",
            "-",
            f"<= {TARGET_S:.0f} s @30 rounds/run",
            verdict(inproc["scaled_30_rounds_s"] <= TARGET_S),
        )
    )
    result.rows.append(
        Row(
            f"{NAME} flower ({n} runs x {flower['runs'][0]['rounds']} rounds, one Ray)",
            f"{fmt_s(flower['total_s'])} total; {fmt_s(flower['scaled_30_rounds_s'])} @30 rounds/run "
            f"(round {fmt_s(flower['round_median_s'])}, per-run overhead {fmt_s(flower['overhead_median_s'])}); "
            f"Ray start {fmt_s(ray_start)}, stop {fmt_s(ray_stop)}",
            f"inprocess {fmt_s(inproc['scaled_30_rounds_s'])} @30 rounds/run",
            f"{result.raw['flower_over_inprocess']:.1f}x / info",
            "info",
        )
    )
    return result
