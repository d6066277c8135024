"""Benchmark 6: the dashboard, `term-fl runs` and `term-fl report` against the size of the results store.

Calls :func:`benchmarks.dashboard_bench.bench_dashboard`: stores of 50 and
500 runs (60 rounds x 100 devices; the sweep the comparison and the report
look at is the same 50 runs in both) and of 100 runs with 6 and 60 rounds.
Targets: the 500-run store costs <= 2x the 50-run store, 60 rounds <= 1.5x
6 rounds, for every view. --size small (for CI, seconds): 50 vs 150 runs of
20 rounds x 10 devices, 20 runs of 2 vs 20 rounds.
"""

from __future__ import annotations

from .common import BenchResult, Options, Row, fmt_s, verdict
from .dashboard_bench import VIEWS, bench_dashboard

NAME = "dashboard"
TARGETS = {"history": 2.0, "rounds": 1.5}
AXES = {"history": ("history_small", "history_large"), "rounds": ("rounds_short", "rounds_long")}


def run(opts: Options) -> BenchResult:
    raw = bench_dashboard(opts.size, opts.work_dir)
    raw["ratios"] = {}
    result = BenchResult(NAME, raw={**raw, "targets": TARGETS})
    for axis, (base_key, big_key) in AXES.items():
        base, big = raw["stores"][base_key], raw["stores"][big_key]
        what = (f"{big['runs']} vs {base['runs']} runs" if axis == "history"
                else f"{big['rounds']} vs {base['rounds']} rounds")  # fmt: skip
        raw["ratios"][axis] = {}
        for view, label in VIEWS.items():
            ratio = big[view]["median_s"] / base[view]["median_s"]
            raw["ratios"][axis][view] = ratio
            result.rows.append(
                Row(
                    f"{NAME} {label}, {what}",
                    fmt_s(big[view]["median_s"]),
                    fmt_s(base[view]["median_s"]),
                    f"{ratio:.2f} / <= {TARGETS[axis]}",
                    verdict(ratio <= TARGETS[axis]),
                )
            )
    return result
