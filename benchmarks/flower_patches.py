"""Benchmark: what each opt-in patch of Flower's Simulation Engine buys, each measured on and off in this run.

The three patches of :mod:`term_fl.flower_internals` (``TERM_FL_FLOWER_PATCHES``),
each against Flower's own behaviour on the workload it was written for:

- ``dispatcher`` (the linear message dispatcher): Flower's Simulation Engine
  with N virtual clients, 100 trained and ~100 evaluated per round, 5 rounds
  (:func:`benchmarks.scale.run_point`, a child process per point, the
  engine's node table on in both so that discovery does not dominate):
  median round (round 1 dropped);
- ``node-table`` (the engine's node -> partition table): node discovery at N
  nodes (:func:`benchmarks.discovery._point`, a child process per point):
  ``FederationResult.discovery_s`` against asking every node;
- ``actor-reuse`` (ClientApp actors kept across the runs of a Ray session):
  the vehicle table (fedavg, qffl q=5, term; 5 seeds) at 5 rounds per run on
  Flower's engine in one ``ray_session`` (:func:`benchmarks.vehicle_table._run_table`):
  the per-run overhead (wall time outside the rounds; median) and the table's
  total, Ray's start and stop apart.

Off first, then on, for each patch; the load average is recorded before and
after each point. Full: N = 10,000; small: N = 200, 10 per round, 3 runs of 2 rounds.

    python -m benchmarks --only flower_patches [--size full]
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from term_fl.config import with_overrides
from term_fl.flower_internals import override

from .common import BenchResult, Options, Row, fmt_s, vehicle_scenario

NAME = "flower_patches"
SIZES = {
    "small": {"clients": 200, "per_round": 10, "evaluated": 10, "rounds": 3, "deadline_s": 300,
              "reuse_runs": 3, "reuse_rounds": 2},
    "full": {"clients": 10_000, "per_round": 100, "evaluated": 100, "rounds": 5, "deadline_s": 480,
             "reuse_runs": 15, "reuse_rounds": 5},
}


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _with_load(measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``measure()``'s numbers with the load average before and after it."""
    before = _load()
    point = measure()
    return {**point, "load_before": before, "load_after": _load()}


def _dispatcher(size: dict[str, Any], opts: Options, tmp: Path) -> dict[str, dict[str, Any]]:
    from .scale import run_point

    return {
        mode: _with_load(lambda mode=mode: run_point(size["clients"], size, size["deadline_s"], opts, tmp, mode))
        for mode in ("flower", "linear")
    }


def _node_table(size: dict[str, Any], opts: Options) -> dict[str, dict[str, Any]]:
    from .discovery import _point

    return {mode: _with_load(lambda mode=mode: _point(size["clients"], mode, opts)) for mode in ("query", "engine")}


def _actor_reuse(size: dict[str, Any], opts: Options, tmp: Path) -> dict[str, dict[str, Any]]:
    from term_fl.engines.flower import actors_reused, ray_session

    from .vehicle_table import _run_table, table_cells

    base, source = vehicle_scenario(opts)
    cells = table_cells(base, "full")[: size["reuse_runs"]]
    points = {}
    for mode, patches in (("off", "none"), ("on", "actor-reuse")):
        def measure(mode: str = mode, patches: str = patches) -> dict[str, Any]:
            folder = tmp / f"reuse-{mode}"
            folder.mkdir()
            with override(patches=patches):
                t0 = time.perf_counter()
                session = ray_session(with_overrides(base, {"run.engine": "flower"}))
                session.__enter__()
                ray_start = time.perf_counter() - t0
                try:
                    table = _run_table(cells, "flower", folder, max_rounds=size["reuse_rounds"])
                    reused = actors_reused()
                finally:
                    t1 = time.perf_counter()
                    session.__exit__(None, None, None)
                    ray_stop = time.perf_counter() - t1
            return {**table, "ray_start_s": ray_start, "ray_stop_s": ray_stop, "actors_reused": reused,
                    "data": source}

        points[mode] = _with_load(measure)
    return points


def _ratio(on: float | None, off: float | None) -> str:
    return "-" if not on or not off else f"{on / off:.3g} (on / off)"


def run(opts: Options) -> BenchResult:
    size = SIZES[opts.size]
    result = BenchResult(NAME)
    with tempfile.TemporaryDirectory(prefix="tfl-bench-patches-", dir=opts.work_dir) as tmp_name:
        tmp = Path(tmp_name)
        dispatcher = _dispatcher(size, opts, tmp)
        node_table = _node_table(size, opts)
        reuse = _actor_reuse(size, opts, tmp)
    result.raw = {"size": size, "dispatcher": dispatcher, "node_table": node_table, "actor_reuse": reuse}
    n = f"{size['clients']:,}"
    off, on = dispatcher["flower"], dispatcher["linear"]
    result.rows.append(Row(
        f"{NAME} dispatcher: {n} clients, {size['per_round']}/round, median round",
        f"on {fmt_s(on['round_median_s'])} ({on['rounds_completed']}/{on['rounds_planned']} rounds; "
        f"load {on['load_before'][0]:.1f}-{on['load_after'][0]:.1f})",
        f"off (Flower's) {fmt_s(off['round_median_s'])} ({off['rounds_completed']}/{off['rounds_planned']} rounds; "
        f"load {off['load_before'][0]:.1f}-{off['load_after'][0]:.1f})",
        _ratio(on["round_median_s"], off["round_median_s"]), "info",
    ))
    off, on = node_table["query"], node_table["engine"]
    result.rows.append(Row(
        f"{NAME} node-table: discovery at {n} nodes",
        f"on {fmt_s(on.get('discovery_s'))} (run {fmt_s(on.get('wall_s'))}; "
        f"load {on['load_before'][0]:.1f}-{on['load_after'][0]:.1f})",
        f"off (every node asked) {fmt_s(off.get('discovery_s'))} (run {fmt_s(off.get('wall_s'))}; "
        f"load {off['load_before'][0]:.1f}-{off['load_after'][0]:.1f})",
        _ratio(on.get("discovery_s"), off.get("discovery_s")), "info",
    ))
    off, on = reuse["off"], reuse["on"]
    runs = len(on["runs"])
    result.rows.append(Row(
        f"{NAME} actor-reuse: {runs} runs x {on['runs'][0]['rounds']} rounds, one Ray, per-run overhead",
        f"on {fmt_s(on['overhead_median_s'])} (first run {fmt_s(on['first_run_overhead_s'])}; table "
        f"{fmt_s(on['total_s'])}; {on['actors_reused']} reused; load {on['load_before'][0]:.1f}-{on['load_after'][0]:.1f})",
        f"off {fmt_s(off['overhead_median_s'])} (table {fmt_s(off['total_s'])}; "
        f"load {off['load_before'][0]:.1f}-{off['load_after'][0]:.1f})",
        _ratio(on["overhead_median_s"], off["overhead_median_s"]), "info",
    ))
    return result
