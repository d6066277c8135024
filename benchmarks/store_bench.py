"""Write time of one round in the results store (term_fl.results).

A round of ``num_devices`` devices is one ``record_round`` call: one training
row per device, one evaluation row per device and split (val, test), and the
statistics of both splits. The target is 0.2 s for 10,000 devices.

    python -m benchmarks.store_bench [num_devices] [rounds]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from term_fl.common.keys import EVAL_SPLITS as SPLITS
from term_fl.results import EvalRow, ResultsStore, TrainRow


def _round_rows(num_devices: int, rng: np.random.Generator) -> tuple[list[TrainRow], list[EvalRow]]:
    loss = rng.exponential(1.0, size=(4, num_devices)).tolist()
    accuracy = rng.uniform(0.0, 1.0, size=(2, num_devices)).tolist()
    examples = rng.integers(10, 500, size=num_devices).tolist()
    train = [
        TrainRow(k, True, True, loss[0][k], loss[1][k], 1.0 / num_devices, examples[k]) for k in range(num_devices)
    ]
    evals = [
        EvalRow(k, split, loss[2 + s][k], accuracy[s][k], int(accuracy[s][k] * examples[k]), examples[k])
        for s, split in enumerate(SPLITS)
        for k in range(num_devices)
    ]
    return train, evals


def bench_store(num_devices: int = 10_000, rounds: int = 3, path: str | Path | None = None) -> dict[str, float]:
    """Record ``rounds`` rounds of ``num_devices`` devices and time each ``record_round``.

    Parameters
    ----------
    num_devices
        Devices per round (rows: num_devices train + 2 x num_devices eval).
    rounds
        Rounds to record; the median of their write times is reported.
    path
        The database file; None writes to a temporary folder removed after.

    Returns
    -------
    dict
        ``median_s`` (seconds per round write), ``min_s``, ``max_s``,
        ``num_devices``, ``rounds``, ``rows_per_round``.
    """
    rng = np.random.default_rng(0)
    stats = {split: {"mean": 0.5, "pooled_mean": 0.5, "worst_10": 0.1, "best_10": 0.9, "std": 0.2} for split in SPLITS}
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "results.db" if path is None else Path(path)
        with ResultsStore(db) as store:
            run_id = store.create_run(
                name="store-bench", scenario="bench", engine="none", strategy="term",
                strategy_params={"t": 1.0}, seed=0, config_hash="bench", config={}, data={},
                rounds_planned=rounds,
            )  # fmt: skip
            times = []
            for server_round in range(1, rounds + 1):
                train, evals = _round_rows(num_devices, rng)
                start = time.perf_counter()
                store.record_round(run_id, server_round, train_rows=train, eval_rows=evals, stats=stats)
                times.append(time.perf_counter() - start)
            store.finish_run(run_id)
    return {
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "num_devices": num_devices,
        "rounds": rounds,
        "rows_per_round": num_devices * (1 + len(SPLITS)),
    }


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    result = bench_store(*args)
    print(
        f"{result['num_devices']} devices ({result['rows_per_round']} rows) per round: "
        f"median {result['median_s']:.3f} s, min {result['min_s']:.3f} s, max {result['max_s']:.3f} s "
        f"over {result['rounds']} rounds"
    )
