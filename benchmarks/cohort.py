"""Benchmark group ``cohort``: the cohort executor against the sequential one, ratios within one run.

Three tables (``python -m benchmarks --only cohort [--device cuda]``):

- **vehicle** (CPU only: its target is the CPU's): the vehicle-sensor table (fedavg, qffl q = 5, term t from the
  scenario, x 5 seeds, the scenario's 100 rounds) through ``run_federation``
  into a results store, once per executor, runs interleaved
  (sequential, cohort, sequential, ...). Both single-threaded (the in-process
  Grid sets one thread), both evaluate every device on val and test every
  round. Reported: *client time per round* (the Grid's train and evaluate
  ``send_and_receive`` calls: messages in, replies out; median over rounds),
  and the end-to-end table time (server, statistics, records and per-run
  start-up included). Target: client time >= 5x less on the CPU.
- **synthetic**: Synthetic(1, 1) with 1,000 devices (lr 0.05, 1 epoch,
  batch 10, splits 60/20/20: the 0.1 default's training settings, pinned here
  so that a change of the default does not change this benchmark), 100 and 1,000 devices per
  round, logistic regression and an MLP (hidden 64): client time per round,
  median over the rounds after the first (the first builds the devices).
  Targets: >= 10x at 1,000 per round on the CPU; on CUDA >= 30x at 1,000
  per round, and the MLP's cohort on the GPU faster than on the CPU (the
  CPU cohort is measured in the same run).
- **floor**: the arithmetic of one such round as one chain of large matrix
  products (every trained row through the model's forward and backward
  once per epoch, every evaluation row forward once, with one weight set),
  timed alone: what a round costs without any per-device or per-step work.

--size small runs 3 vehicle runs of 3 rounds and 60 Synthetic devices.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from term_fl.clientapp.app import make_client_app
from term_fl.data import dataset_for
from term_fl.clientapp.cache import ClientCache
from term_fl.config import Scenario, load_scenario, with_overrides
from term_fl.engines.cohort_executor import CohortExecutor
from term_fl.engines.inprocess import InProcessGrid
from term_fl.federation.loop import Recorder, RoundRecord, run_federation
from term_fl.results import ResultsStore
from term_fl.runs.run import RunRecorder, run_id_for

from .common import ONE_RUN, BenchResult, Options, Row, fmt_s, median, verdict, vehicle_scenario
from .timing_grid import TimingGrid
from .vehicle_table import table_cells

NAME = "cohort"
EXECUTORS = ("sequential", "cohort")
VEHICLE_TARGET = 5.0
SYNTHETIC_TARGET = {"cpu": 10.0, "cuda": 30.0}
SYNTHETIC = {
    "small": {"devices": 60, "per_round": (10, 60), "rounds": 3},
    "full": {"devices": 1000, "per_round": (100, 1000), "rounds": 4},
}
MODELS = {"logreg": ["model.name=logreg"], "mlp": ["model.name=mlp", "model.hidden=64"]}


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _timed_run(scenario: Scenario, recorder: Recorder) -> tuple[list[float], list[float], float]:
    """Client time of every round (the Grid's train + evaluate calls), their CPU time, the run's wall time."""
    num_devices = dataset_for(scenario).num_devices
    cache = ClientCache()  # as run_scenario builds the in-process engine
    executor = CohortExecutor(cache) if scenario.run.executor == "cohort" else None
    inner = InProcessGrid(make_client_app(cache), num_devices, executor=executor)
    grid = TimingGrid(inner)
    client_s: list[float] = []
    client_cpu_s: list[float] = []

    def on_round(record: RoundRecord, total: int) -> None:
        calls = [c for c in grid.calls if c.kind in ("train", "evaluate")]
        client_s.append(sum(c.duration for c in calls))
        client_cpu_s.append(sum(c.cpu_s for c in calls))
        grid.calls.clear()

    start = time.perf_counter()
    with inner:
        run_federation(grid, scenario, recorder, on_round=on_round)
    _sync(scenario.client.device)
    return client_s, client_cpu_s, time.perf_counter() - start


# --------------------------------------------------------------------------
# vehicle table
# --------------------------------------------------------------------------


def _vehicle(opts: Options, tmp: Path) -> dict[str, Any]:
    base, source = vehicle_scenario(opts, "run.engine=inprocess")
    cells = table_cells(base, opts.size)
    if opts.size == "small":
        cells = cells[:3]
    out: dict[str, Any] = {ex: {"client_round_s": [], "client_round_cpu_s": [], "run_wall_s": []} for ex in EXECUTORS}
    with ResultsStore(tmp / "vehicle.db") as store:
        for i, cell in enumerate(cells):
            for executor in EXECUTORS:  # interleaved: a load change hits both
                scenario = with_overrides(cell, {"run.executor": executor})
                recorder = RunRecorder(store, tmp / "runs" / f"{executor}-{i}", run_id=run_id_for(scenario))
                client_s, cpu_s, wall = _timed_run(scenario, recorder)
                out[executor]["client_round_s"].extend(client_s)
                out[executor]["client_round_cpu_s"].extend(cpu_s)
                out[executor]["run_wall_s"].append(wall)
    for executor in EXECUTORS:
        entry = out[executor]
        entry["client_round_median_s"] = median(entry["client_round_s"])
        entry["client_round_cpu_median_s"] = median(entry["client_round_cpu_s"])
        entry["table_s"] = float(sum(entry["run_wall_s"]))
    out["client_ratio"] = out["sequential"]["client_round_median_s"] / out["cohort"]["client_round_median_s"]
    out["client_cpu_ratio"] = (out["sequential"]["client_round_cpu_median_s"]
                               / out["cohort"]["client_round_cpu_median_s"])
    out["table_ratio"] = out["sequential"]["table_s"] / out["cohort"]["table_s"]
    out["scenario"] = {"name": base.name, **source, "runs": len(cells), "rounds_per_run": cells[0].run.rounds,
                       "model": base.model.name, "device": base.client.device}
    return out


# --------------------------------------------------------------------------
# Synthetic, 1,000 devices
# --------------------------------------------------------------------------


def _synthetic_scenario(opts: Options, model: str, per_round: int, device: str, executor: str) -> Scenario:
    size = SYNTHETIC[opts.size]
    return load_scenario(None, [
        "sweep={}", *ONE_RUN, "run.engine=inprocess", f"run.executor={executor}", "strategy.name=fedavg",
        "client.lr=0.05", "client.epochs=1", "client.batch_size=10",  # pinned: the numbers in benchmarks/README
        "data.train_fraction=0.6", "data.val_fraction=0.2", "data.test_fraction=0.2",
        f"data.num_devices={size['devices']}", f"run.clients_per_round={per_round}", f"run.rounds={size['rounds']}",
        f"client.device={device}", *MODELS[model],
    ], environ={})


def _synthetic_point(opts: Options, model: str, per_round: int, device: str, executor: str) -> dict[str, Any]:
    scenario = _synthetic_scenario(opts, model, per_round, device, executor)
    client_s, cpu_s, wall = _timed_run(scenario, Recorder())
    return {"client_round_s": client_s, "client_round_median_s": median(client_s[1:]),
            "client_round_cpu_s": cpu_s, "client_round_cpu_median_s": median(cpu_s[1:]), "wall_s": wall}


def _synthetic(opts: Options) -> dict[str, Any]:
    points: dict[str, Any] = {}
    for model in MODELS:
        for per_round in SYNTHETIC[opts.size]["per_round"]:
            key = f"{model}-{per_round}"
            points[key] = {ex: _synthetic_point(opts, model, per_round, opts.device, ex) for ex in EXECUTORS}
            if opts.device == "cuda":  # the same cohort on the CPU, for GPU vs CPU
                points[key]["cohort_cpu"] = _synthetic_point(opts, model, per_round, "cpu", "cohort")
            seq, coh = (points[key][ex]["client_round_median_s"] for ex in EXECUTORS)
            points[key]["ratio"] = seq / coh
            seq, coh = (points[key][ex]["client_round_cpu_median_s"] for ex in EXECUTORS)
            points[key]["cpu_ratio"] = seq / coh
    return points


# --------------------------------------------------------------------------
# the floor: one round's arithmetic as one chain of large products
# --------------------------------------------------------------------------


def round_floor(scenario: Scenario, device: str, repeats: int = 5) -> dict[str, Any]:
    """Time one round's arithmetic with one weight set: forward + backward of every trained row
    (``epochs`` times, the sampled devices of round 1 of the run seed), forward of every evaluation row."""
    from term_fl.common.seeding import TRAIN_SAMPLING

    dataset = dataset_for(scenario)
    m = min(scenario.run.clients_per_round, dataset.num_devices)
    rng = np.random.default_rng([scenario.run.seed, 1, TRAIN_SAMPLING])
    sampled = rng.choice(dataset.num_devices, size=m, replace=False)
    train_rows = int(sum(len(dataset.device(int(k)).y_train) for k in sampled)) * scenario.client.epochs
    eval_rows = int(sum(len(dataset.device(k).y_val) + len(dataset.device(k).y_test) for k in range(dataset.num_devices)))
    d, c = dataset.num_features, dataset.num_classes
    hidden = scenario.model.mlp.hidden if scenario.model.name == "mlp" else 0
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(train_rows, d, generator=gen).to(device)
    x_eval = torch.randn(eval_rows, d, generator=gen).to(device)
    y = torch.randint(0, c, (train_rows,), generator=gen).to(device)
    dims = [d, hidden, c] if hidden else [d, c]
    weights = [torch.randn(o, i, generator=gen).to(device) * 0.1 for i, o in zip(dims, dims[1:])]

    def chain() -> None:
        acts = [x]
        for w in weights[:-1]:
            acts.append(torch.relu(acts[-1] @ w.t()))
        g = torch.softmax(acts[-1] @ weights[-1].t(), dim=1)
        g[torch.arange(train_rows, device=g.device), y] -= 1.0
        for w, a in zip(reversed(weights), reversed(acts)):
            _ = g.t() @ a
            g = g @ w
        h = x_eval
        for w in weights[:-1]:
            h = torch.relu(h @ w.t())
        (h @ weights[-1].t()).argmax(1)

    chain()
    _sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        chain()
        _sync(device)
        times.append(time.perf_counter() - start)
    return {"floor_s": min(times), "train_rows": train_rows, "eval_rows": eval_rows, "dims": dims}


# --------------------------------------------------------------------------


def _vehicle_rows(result: BenchResult, v: dict[str, Any]) -> None:
    result.rows.append(Row(
        f"{NAME} vehicle table ({v['scenario']['runs']} runs x {v['scenario']['rounds_per_run']} rounds, "
        "CPU, 1 thread): client time per round",
        f"cohort {fmt_s(v['cohort']['client_round_median_s'])}",
        f"sequential {fmt_s(v['sequential']['client_round_median_s'])}",
        f"{v['client_ratio']:.1f}x (CPU time {v['client_cpu_ratio']:.1f}x) / >= {VEHICLE_TARGET:.0f}x",
        verdict(v["client_ratio"] >= VEHICLE_TARGET),
    ))
    result.rows.append(Row(
        f"{NAME} vehicle table end to end (same runs, store and summaries included)",
        f"cohort {fmt_s(v['cohort']['table_s'])}",
        f"sequential {fmt_s(v['sequential']['table_s'])}",
        f"{v['table_ratio']:.1f}x / info",
        "info",
    ))


def run(opts: Options) -> BenchResult:
    threads = torch.get_num_threads()
    result = BenchResult(NAME)
    try:
        vehicle = None
        if opts.device == "cpu":  # its target is the CPU's; on a GPU machine the time goes to the Synthetic table
            with tempfile.TemporaryDirectory(prefix="tfl-bench-cohort-", dir=opts.work_dir) as tmp:
                vehicle = _vehicle(opts, Path(tmp))
        synthetic = _synthetic(opts)
        torch.set_num_threads(1)
        floors = {}
        for model in MODELS:
            for per_round in SYNTHETIC[opts.size]["per_round"]:
                scenario = _synthetic_scenario(opts, model, per_round, opts.device, "cohort")
                floors[f"{model}-{per_round}"] = round_floor(scenario, opts.device)
    finally:
        torch.set_num_threads(threads)
    device_name = torch.cuda.get_device_name(0) if opts.device == "cuda" else "CPU, 1 thread"
    result.raw = {"device": opts.device, "device_name": device_name, "vehicle": vehicle, "synthetic": synthetic,
                  "floor": floors, "targets": {"vehicle_client": VEHICLE_TARGET, "synthetic": SYNTHETIC_TARGET}}

    if vehicle is not None:
        _vehicle_rows(result, vehicle)
    target = SYNTHETIC_TARGET[opts.device]
    top = max(SYNTHETIC[opts.size]["per_round"])
    for key, point in synthetic.items():
        model, per_round = key.rsplit("-", 1)
        floor = floors[key]["floor_s"]
        coh = point["cohort"]["client_round_median_s"]
        extra = ""
        if "cohort_cpu" in point:
            extra = f"; cohort on the CPU {fmt_s(point['cohort_cpu']['client_round_median_s'])}"
        result.rows.append(Row(
            f"{NAME} Synthetic {SYNTHETIC[opts.size]['devices']} devices, {per_round}/round, {model} "
            f"({device_name}): client time per round",
            f"cohort {fmt_s(coh)} (floor {fmt_s(floor)}, {coh / floor:.0f}x the floor){extra}",
            f"sequential {fmt_s(point['sequential']['client_round_median_s'])}",
            f"{point['ratio']:.1f}x (CPU time {point['cpu_ratio']:.1f}x) / "
            + (f">= {target:.0f}x" if int(per_round) == top else "info"),
            verdict(point["ratio"] >= target) if int(per_round) == top else "info",
        ))
        if "cohort_cpu" in point and model == "mlp":
            gpu_over_cpu = point["cohort_cpu"]["client_round_median_s"] / coh
            result.rows.append(Row(
                f"{NAME} MLP cohort, {per_round}/round: GPU vs CPU",
                f"GPU {fmt_s(coh)}", f"CPU {fmt_s(point['cohort_cpu']['client_round_median_s'])}",
                f"{gpu_over_cpu:.1f}x / > 1x", verdict(gpu_over_cpu > 1.0),
            ))
    return result
