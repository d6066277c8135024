"""Check a finished compose run from its results store (run by deploy/e2e.sh).

    python e2e_check.py DB ROUNDS NUM_DEVICES [CRASHED]

Standard library only: e2e.sh pipes it into ``python -`` inside the
dashboard container, which mounts the results volume. Checks that the store
holds exactly one run, ``finished`` with every planned round; that every round
is ``ok`` with a training row per sampled device (each included, with its
loss and examples) and validation and test rows for every evaluated device
(all N, or ceil(run.evaluate_fraction x N) of them); and
that the round statistics exist. CRASHED names a partition whose SuperNode
was killed during the run: its rows may be missing (its updates excluded).
Prints one JSON line (run id, round durations) and exits 0, or prints every
problem and exits 1.
"""

from __future__ import annotations

import json
import math
import sqlite3
import sys


def check(db: str, rounds: int, num_devices: int, crashed: int | None = None) -> tuple[list[str], dict]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    problems: list[str] = []
    runs = con.execute(
        "SELECT run_id, status, rounds_planned, rounds_completed, error, config_json, started_at, finished_at "
        "FROM runs"
    ).fetchall()
    if len(runs) != 1:
        return [f"expected 1 run in the store, found {len(runs)}: {[r[:2] for r in runs]}"], {}
    run_id, status, planned, completed, error, config_json, started, finished = runs[0]
    if (status, planned, completed) != ("finished", rounds, rounds):
        problems.append(
            f"run {run_id}: status={status} rounds {completed}/{planned}, expected finished {rounds}/{rounds}"
            f" (error: {error})"
        )
    config = json.loads(config_json)
    per_round = min(int(config["run"]["clients_per_round"]), num_devices)
    evaluated = math.ceil(float(config["run"].get("evaluate_fraction", 1.0)) * num_devices - 1e-9)
    rows = con.execute("SELECT round, status, num_included, duration_s FROM rounds WHERE run_id = ? ORDER BY round",
                       (run_id,)).fetchall()
    if [r[0] for r in rows] != list(range(1, rounds + 1)):
        problems.append(f"rounds recorded {[r[0] for r in rows]}, expected 1..{rounds}")
    everyone = set(range(num_devices))
    may_miss = set() if crashed is None else {crashed}
    for rnd, rstatus, included, _ in rows:
        if rstatus != "ok" or not per_round - len(may_miss) <= included <= per_round:
            problems.append(f"round {rnd}: status {rstatus}, {included} of {per_round} updates included")
        train = con.execute(
            "SELECT partition_id, included, train_loss, num_examples FROM device_train WHERE run_id = ? AND round = ?",
            (run_id, rnd),
        ).fetchall()
        if len(train) != per_round or not all(
            (inc == 1 and loss is not None and n and n > 0 or pid in may_miss) and 0 <= pid < num_devices
            for pid, inc, loss, n in train
        ):
            problems.append(f"round {rnd}: training rows {train}")
        for split in ("val", "test"):
            got = {
                pid for pid, acc, n in con.execute(
                    "SELECT partition_id, accuracy, examples FROM device_eval "
                    "WHERE run_id = ? AND round = ? AND split = ?", (run_id, rnd, split),
                )
                if acc is not None and 0.0 <= acc <= 1.0 and n > 0
            }
            complete = everyone - may_miss <= got if evaluated == num_devices else len(got) >= evaluated - len(may_miss)
            if not (complete and got <= everyone):
                problems.append(f"round {rnd}: {split} rows for devices {sorted(got)}, expected {evaluated} "
                                f"of 0..{num_devices - 1}")
        stats = {s for (s,) in con.execute("SELECT split FROM round_stats WHERE run_id = ? AND round = ?",
                                           (run_id, rnd))}
        if stats != {"val", "test"}:
            problems.append(f"round {rnd}: statistics for {sorted(stats)}, expected val and test")
    summary = {
        "run_id": run_id,
        "status": status,
        "rounds": completed,
        "devices": num_devices,
        "clients_per_round": per_round,
        "round_s": [round(r[3], 2) for r in rows if r[3] is not None],
        "run_s": round(finished - started, 1) if finished else None,
    }
    return problems, summary


def main(argv: list[str]) -> int:
    db, rounds, num_devices = argv[0], int(argv[1]), int(argv[2])
    crashed = int(argv[3]) if len(argv) > 3 and argv[3] else None
    problems, summary = check(db, rounds, num_devices, crashed)
    for p in problems:
        print(f"e2e_check: {p}", file=sys.stderr)
    print(json.dumps(summary))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
