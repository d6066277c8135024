"""What a run stored, as comparable values: every per-device row, every round's statistics and numbers.

Used to check that something which must not change a number (the fast paths
into Flower's internals, the Simulation-Engine patches) stores the same.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from term_fl.results import ResultsStore

SPLITS = ("val", "test")


def stored(store: ResultsStore, run_id: str) -> dict[str, Any]:
    """The run's rows and statistics, without its timings and ids."""
    rounds = [{k: v for k, v in r.items() if k != "duration_s"} for r in store.load_rounds(run_id)]
    return {
        "train": store.load_train(run_id),
        **{f"eval_{split}": store.load_metrics(run_id, split) for split in SPLITS},
        **{f"stats_{split}": store.load_round_stats(run_id, split) for split in SPLITS},
        "rounds": rounds,
    }


def assert_same_stored(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Every stored value equal, as stored: no tolerance (NaN where both have NaN)."""
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], dict):  # columns
            assert a[key].keys() == b[key].keys(), key
            for column in a[key]:
                np.testing.assert_array_equal(a[key][column], b[key][column], err_msg=f"{key}.{column}")
        else:  # lists of rows of numbers, lists and dicts: compared as JSON (floats exactly, NaN as NaN)
            assert len(a[key]) == len(b[key]) > 0, key
            assert json.dumps(a[key], sort_keys=True) == json.dumps(b[key], sort_keys=True), key
