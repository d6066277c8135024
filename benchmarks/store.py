"""Benchmark 5: writing one round of 10,000 devices' metrics to the results store.

Calls :func:`benchmarks.store_bench.bench_store` (one ``record_round`` of
10,000 training rows and 20,000 evaluation rows, median over 3 rounds).
Target: <= 0.2 s. --size small uses the same 10,000 devices (it takes well
under a second).
"""

from __future__ import annotations

from .common import BenchResult, Options, Row, fmt_s, verdict
from .store_bench import bench_store

NAME = "store"
TARGET_S = 0.2
NUM_DEVICES = 10_000
ROUNDS = {"small": 3, "full": 5}


def run(opts: Options) -> BenchResult:
    raw = bench_store(num_devices=NUM_DEVICES, rounds=ROUNDS[opts.size])
    result = BenchResult(NAME, raw={**raw, "target_s": TARGET_S})
    result.rows.append(
        Row(
            f"{NAME} (one round, {NUM_DEVICES:,} devices, {raw['rows_per_round']:,} rows)",
            f"median {fmt_s(raw['median_s'])}",
            "-",
            f"<= {TARGET_S} s",
            verdict(raw["median_s"] <= TARGET_S),
        )
    )
    return result
