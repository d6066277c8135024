"""Hostile clients against TERM's robust mode and the robust aggregators: the table in docs/scenarios.md.

    python -m benchmarks.hostile_table [--seeds 0,1,2,3,4] [--rounds 150] [--jobs 1] [--out FILE.json]

Every cell is the vehicle data and settings of configs/noisy-sensors.toml
(23 sensors, 10 sampled per round, linear SVM, term-fl's in-process engine,
sequential executor) with one attack: the labels of 6 devices flipped (the
noisy-sensors scenario), or partition 0 lying in each round it is sampled
(its reported loss, alone or with labels flipped on its own data, its
size, its weights x 1e30 or x -10, its reply delivered three times); each
strategy runs on the same seeds. A cell is the test device
mean of the final global model over the devices whose data are clean (all
23, or the 17 unflipped), mean and standard error over the seeds, and, for
the loss lies, partition 0's mean aggregation weight over the rounds it was
aggregated in. ``--jobs N`` runs N cells at a time in child processes
(every cell is seeded on its own: the numbers do not depend on N).

:class:`HostileGrid` is the in-process grid with a liar; tests/test_hostile_clients.py uses it too.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from term_fl.common.keys import NUM_EXAMPLES, TRAIN_LOSS_BEFORE
from term_fl.engines.inprocess import InProcessGrid
from term_fl.flower_internals import from_array_record, to_array_record

REPO = Path(__file__).resolve().parents[1]
HOSTILE = 0  # the partition that lies

ATTACKS: dict[str, dict[str, Any]] = {
    "none": {},
    "labels flipped on 6 devices": {"overrides": ["data.noise=flip_labels", "data.num_noisy=6"]},
    "loss -1e300": {"loss": -1e300},
    "loss 0": {"loss": 0.0},
    "loss 1e300": {"loss": 1e300},
    # a liar that trains on flipped labels and claims a perfect fit: what TERM's robust mode trusts most
    "labels flipped on it, loss -1e300": {"loss": -1e300, "overrides": [
        "data.noise=flip_labels", f"data.noisy_devices=[{HOSTILE}]", "data.num_noisy=0"]},
    "weights x 1e30": {"scale": 1e30},
    "weights x -10": {"scale": -10.0},  # its model reversed and lengthened (a linear model's predictions flip)
    "num-examples 1e300": {"size": 1e300},
    "reply delivered 3 times": {"replays": 2},
}
TERM = ["strategy.name=term", "strategy.t=-2", "strategy.loss_transform=auto"]  # the default for t < 0
STRATEGIES: dict[str, list[str]] = {
    "FedAvg": ["strategy.name=fedavg"],
    "TERM t=-2, raw losses": [*TERM, "strategy.loss_transform=none"],
    "TERM t=-2 (median_mad, default)": TERM,
    "TERM t=-2 + defences": [*TERM, "strategy.max_update_norm=3", "strategy.max_size_ratio=3"],
    "median": ["strategy.name=median"],
    "trimmed mean (beta 0.3)": ["strategy.name=trimmed_mean", "strategy.beta=0.3"],
    "multi-Krum (f 3, 7 kept)": ["strategy.name=krum", "strategy.num_malicious=3", "strategy.num_to_keep=7"],
}


class HostileGrid(InProcessGrid):
    """Partition 0 trains honestly, then reports ``loss`` / ``size`` instead of its own, sends its weights x
    ``scale``, or has its reply delivered ``replays`` more times."""

    def __init__(self, *args: Any, loss: float | None = None, scale: float | None = None,
                 size: float | None = None, replays: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.loss, self.scale, self.size, self.replays = loss, scale, size, replays

    def _hostile(self, node_id: int) -> bool:
        return self._contexts[node_id].node_config["partition-id"] == HOSTILE

    def send_and_receive(self, messages: Any, *, timeout: float | None = None) -> list[Any]:  # noqa: D102
        replies = list(super().send_and_receive(messages, timeout=timeout))
        again = [r for r in replies if self._hostile(r.metadata.src_node_id) and r.metadata.message_type == "train"]
        return replies + again * self.replays  # the same reply delivered again

    def _deliver(self, msg: Any) -> Any:
        reply = super()._deliver(msg)
        if msg.metadata.message_type != "train" or not self._hostile(msg.metadata.dst_node_id):
            return reply
        if self.size is not None:
            reply.content["metrics"][NUM_EXAMPLES] = self.size
        if self.loss is not None:
            reply.content["metrics"][TRAIN_LOSS_BEFORE] = self.loss
        if self.scale is not None:
            arrays = from_array_record(reply.content["arrays"])
            with np.errstate(over="ignore"):  # weights of a wrecked global model x 1e30 overflow to inf
                reply.content["arrays"] = to_array_record({k: v * np.float32(self.scale) for k, v in arrays.items()})
        return reply


def run_cell(attack: dict[str, Any], strategy: list[str], seed: int, rounds: int) -> dict[str, float]:
    """One run: the final test device mean over the clean devices, and the liar's mean weight."""
    from term_fl.clientapp.app import make_client_app
    from term_fl.clientapp.cache import ClientCache
    from term_fl.config import load_scenario
    from term_fl.federation.loop import Recorder, run_federation
    from term_fl.runs.run import clean_device_statistics

    class Rounds(Recorder):
        def start(self, scenario: Any, metadata: dict[str, Any]) -> None:
            self.noisy = set((metadata.get("noise") or {}).get("devices") or [])
            self.rounds: list[Any] = []

        def record_round(self, record: Any) -> None:
            self.rounds.append(record)

    overrides = ["run.engine=inprocess", "run.executor=sequential", "run.reference=none", f"run.rounds={rounds}",
                 f"run.seed={seed}", "client.tau=0", "data.noise=none", *attack.get("overrides", []), *strategy]
    scenario = load_scenario(REPO / "configs" / "noisy-sensors.toml", overrides)
    recorder = Rounds()
    lies = {k: attack[k] for k in ("loss", "scale", "size", "replays") if k in attack}
    with HostileGrid(make_client_app(ClientCache()), 23, **lies) as grid:  # the in-process engine's client app
        run_federation(grid, scenario, recorder)
    clean = clean_device_statistics(recorder.rounds[-1].eval_rows, recorder.noisy)
    weights = [r.tilted_weights[HOSTILE] for r in recorder.rounds if HOSTILE in r.tilted_weights]
    return {"clean_mean": float(clean["mean"]), "liar_weight": float(np.mean(weights)) if weights else math.nan}


def _run_named(attack: str, strategy: str, seed: int, rounds: int) -> dict[str, float]:
    """:func:`run_cell` by the names of :data:`ATTACKS` and :data:`STRATEGIES` (for a child process)."""
    import logging

    logging.getLogger("flwr").setLevel(logging.ERROR)  # the liar's exclusions, every round
    return run_cell(ATTACKS[attack], STRATEGIES[strategy], seed, rounds)


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error over seeds (NaN where every value is NaN)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return math.nan, math.nan
    se = float(np.std(finite, ddof=1) / math.sqrt(len(finite))) if len(finite) > 1 else math.nan
    return float(np.mean(finite)), se


def markdown(table: dict[str, dict[str, dict[str, list[float]]]], key: str, attacks: list[str]) -> str:
    """One row per attack, one column per strategy: mean +- standard error of ``key`` over the seeds."""
    names = list(STRATEGIES)
    lines = [f"| attack | {' | '.join(names)} |", f"|---|{'---|' * len(names)}"]
    for attack in attacks:
        cells = []
        for name in names:
            mean, se = mean_se(table[attack][name][key])
            cells.append("-" if not math.isfinite(mean) else f"{mean:.3f} ± {se:.3f}")
        lines.append(f"| {attack} | {' | '.join(cells)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--rounds", type=int, default=150)
    parser.add_argument("--jobs", type=int, default=1, help="cells run at a time, each in a child process")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    import os

    if args.jobs < 1 or args.rounds < 1:
        parser.error(f"--jobs and --rounds must be at least 1 (got {args.jobs}, {args.rounds})")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    seeds = [int(s) for s in args.seeds.split(",")]
    keys = [(a, s, seed) for a in ATTACKS for s in STRATEGIES for seed in seeds]
    # Every cell, in child processes; the results in the order of ``keys``
    start, load_before = time.perf_counter(), os.getloadavg()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(_run_named, a, s, seed, args.rounds) for a, s, seed in keys]
        cells = dict(zip(keys, (f.result() for f in futures), strict=True))
    table = {a: {s: {key: [cells[a, s, seed][key] for seed in seeds] for key in ("clean_mean", "liar_weight")}
                 for s in STRATEGIES} for a in ATTACKS}
    report = {"seeds": seeds, "rounds": args.rounds, "jobs": args.jobs, "wall_s": time.perf_counter() - start,
              "load_average_before": load_before, "load_average_after": os.getloadavg(), "table": table}
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"{len(keys)} runs in {report['wall_s']:.0f} s, {args.jobs} at a time; load average (1, 5, 15 min) "
          f"{load_before} before, {report['load_average_after']} after")
    print(markdown(table, "clean_mean", list(ATTACKS)))
    print()
    print(markdown(table, "liar_weight", ["none", "loss -1e300", "loss 0", "loss 1e300",
                                          "labels flipped on it, loss -1e300"]))
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
