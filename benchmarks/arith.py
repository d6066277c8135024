"""Benchmark group ``arith``: training against the arithmetic it does (issue 26's workload), ratios within one run.

The workload: Synthetic(1, 1), 30 devices, all 30 trained every round,
logistic regression 60 -> 10, batch 10, 1 epoch, lr 0.03, FedAvg; the rest
as the embedded default scenario (every device evaluated on val + test every
10th round). Measured, interleaved so that a change of load falls on all:

- **floor A**: every training row of a round forward and backward once, as
  one chain of large products with one weight set (torch, one thread);
- **floor B**: the round's local SGD as a hand-written batched torch loop of
  the same dependent steps (each device's batches, one ``bmm`` step for all
  devices at a time: gather, scores, softmax, gradient, update), no report;
- **compiled training**: the compiled kernel's local SGD of the 30 devices
  (``linear_kernels.train_linear``) alone, and ``train_compiled`` with its
  report (incoming and trained models' losses);
- **end to end**: the steady round of ``run_federation`` on the in-process
  engine (mean round time after the first 10 rounds, evaluated rounds
  included), default path (``run.executor = "auto"``: compiled) against
  ``run.executor = "cohort"``, blocks of rounds interleaved.

Targets: (a) compiled training <= 2x floor A; (b) the default path's round
>= 3x faster than the cohort executor's; (c) the round against floor A is
reported. The load average (``os.getloadavg``) is printed with the table.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from term_fl.common.seeding import derive_seed
from term_fl.config import Scenario, load_scenario
from term_fl.data import dataset_for
from term_fl.engines import run_scenario
from term_fl.federation.loop import Recorder, RoundRecord
from term_fl.learning.cohort_batches import cohort_schedule, device_rows
from term_fl.learning.compiled_training import compiler_available, train_compiled
from term_fl.learning.models import model_for

from .common import BenchResult, Options, Row, fmt_s, median, verdict

NAME = "arith"
TARGET_A = 2.0  # compiled training <= 2x floor A
TARGET_B = 3.0  # default path's round >= 3x faster than the cohort executor's
WORKLOAD = ["sweep={}", "run.reference=none", "run.engine=inprocess", "strategy.name=fedavg", "model.name=logreg",
            "data.num_devices=30", "run.clients_per_round=30", "client.lr=0.03", "client.epochs=1",
            "client.batch_size=10", "client.device=cpu", "run.seed=0"]
SIZES = {"small": {"repeats": 7, "rounds": 20, "blocks": 1}, "full": {"repeats": 41, "rounds": 110, "blocks": 3}}
WARMUP_ROUNDS = 10
EXECUTORS = ("cohort", "auto")


def workload(executor: str, rounds: int) -> Scenario:
    """The issue's workload on the in-process engine with ``executor``."""
    return load_scenario(None, [*WORKLOAD, f"run.executor={executor}", f"run.rounds={rounds}"], environ={})


class _Durations(Recorder):
    """Each round's wall time (the loop's own) and this process's CPU time between two rounds' records."""

    def __init__(self) -> None:
        self.durations: list[float] = []
        self.cpu: list[float] = []
        self._cpu_at = time.process_time()

    def record_round(self, record: RoundRecord) -> None:  # noqa: D102
        now = time.process_time()
        self.durations.append(record.duration_s)
        self.cpu.append(now - self._cpu_at)
        self._cpu_at = now


class _Round:
    """Round 1's training of the workload as arrays: every device's rows, batches and seeds."""

    def __init__(self, scenario: Scenario) -> None:
        dataset = dataset_for(scenario)
        devices = [dataset.device(k) for k in range(dataset.num_devices)]
        self.x = np.ascontiguousarray(np.concatenate([d.x_train for d in devices]), dtype=np.float32)
        self.y = np.concatenate([d.y_train for d in devices]).astype(np.int64)
        self.sizes = np.array([len(d.y_train) for d in devices], dtype=np.int64)
        self.starts = np.cumsum(self.sizes) - self.sizes
        self.seeds = [derive_seed(scenario.run.seed, 1, k) for k in range(len(devices))]
        self.model = model_for(scenario, dataset)
        self.classes = dataset.num_classes
        self.batch = scenario.client.batch_size


def floor_a(r: _Round) -> Callable[[], None]:
    """Every training row forward and backward once: one chain of large products, one weight set."""
    x, y = torch.from_numpy(r.x), torch.from_numpy(r.y)
    weight = torch.randn(r.classes, x.shape[1], generator=torch.Generator().manual_seed(0)) * 0.1
    rows = torch.arange(len(y))

    def chain() -> None:
        g = torch.softmax(x @ weight.t(), dim=1)
        g[rows, y] -= 1.0
        _ = g.t() @ x
    return chain


def floor_b(r: _Round) -> Callable[[], None]:
    """The round's dependent SGD steps as a bare batched torch loop (the cohort's step, nothing else)."""
    x, y = torch.from_numpy(r.x), torch.from_numpy(r.y)
    plan = cohort_schedule(r.starts, r.sizes, epochs=1, batch_size=r.batch, seeds=r.seeds, device=torch.device("cpu"))
    labels = y[plan.rows]
    weights = plan.mask / plan.count.clamp(min=1.0).unsqueeze(2)
    k_all = len(r.sizes)

    def loop() -> None:
        w = torch.zeros(k_all, r.classes, x.shape[1])
        b = torch.zeros(k_all, r.classes)
        for step, k in enumerate(plan.active):
            xb = x.index_select(0, plan.rows[step, :k].reshape(-1)).view(k, r.batch, -1)
            g = torch.softmax(torch.baddbmm(b[:k].unsqueeze(2), w[:k], xb.transpose(1, 2)), dim=1)
            g.scatter_add_(1, labels[step, :k].unsqueeze(1), torch.full_like(g[:, :1], -1.0))
            g.mul_(weights[step, :k].unsqueeze(1))
            w[:k].sub_(torch.bmm(g, xb), alpha=0.03)
            b[:k].sub_(g.sum(2), alpha=0.03)
    return loop


def compiled_kernel(r: _Round) -> Callable[[], None]:
    """The compiled kernel's local SGD of every device, alone (the batches drawn outside the timing)."""
    from term_fl.learning import linear_kernels

    rows, steps = device_rows(r.starts, r.sizes, epochs=1, batch_size=r.batch, seeds=r.seeds)
    weights = np.zeros((1, r.classes, r.x.shape[1]), np.float32)  # one incoming model for every device
    biases = np.zeros((1, r.classes), np.float32)
    model_of = np.zeros(len(r.sizes), dtype=np.int64)
    return lambda: linear_kernels.train_linear(r.x, r.y, rows, steps, weights, biases, model_of, 0.03, 0.0, 0.0,
                                               0.0, False)


def compiled_with_report(r: _Round) -> Callable[[], None]:
    """``train_compiled`` whole: batches, the kernel, and the report (the incoming and trained models' losses)."""
    return lambda: train_compiled(r.model, r.x, r.y, r.starts, r.sizes, lr=0.03, epochs=1, batch_size=r.batch,
                                  seeds=r.seeds)


def _timed_parts(opts: Options) -> dict[str, dict[str, list[float]]]:
    """Each part timed once per repeat (wall and CPU time), the parts interleaved; one torch thread."""
    r = _Round(workload("auto", 1))
    parts = {"floor_a": floor_a(r), "floor_b": floor_b(r), "kernel": compiled_kernel(r),
             "train_compiled": compiled_with_report(r)}
    times: dict[str, dict[str, list[float]]] = {name: {"wall": [], "cpu": []} for name in parts}
    for name, part in parts.items():  # warm up: compile (or load the cached kernel), allocate
        part()
    for _ in range(SIZES[opts.size]["repeats"]):
        for name, part in parts.items():
            start, cpu = time.perf_counter(), time.process_time()
            part()
            times[name]["cpu"].append(time.process_time() - cpu)
            times[name]["wall"].append(time.perf_counter() - start)
    return times


def _rounds(opts: Options) -> dict[str, dict[str, list[float]]]:
    """Steady rounds of each executor, blocks interleaved: wall and CPU time of the rounds after the warm-up."""
    size = SIZES[opts.size]
    rounds: dict[str, dict[str, list[float]]] = {ex: {"wall": [], "cpu": []} for ex in EXECUTORS}
    for _ in range(size["blocks"]):
        for executor in EXECUTORS:
            recorder = _Durations()
            run_scenario(workload(executor, size["rounds"]), recorder)
            rounds[executor]["wall"].extend(recorder.durations[WARMUP_ROUNDS:])
            rounds[executor]["cpu"].extend(recorder.cpu[WARMUP_ROUNDS:])
    return rounds


def run(opts: Options) -> BenchResult:
    result = BenchResult(NAME)
    if opts.device != "cpu":
        result.rows.append(Row(f"{NAME} (CPU only: the compiled kernel runs on the CPU)", "-", "-", "-", "n/a"))
        return result
    if not compiler_available():
        result.rows.append(Row(f"{NAME}: numba is not installed (pip install 'term-fl[fast]')", "-", "-", "-", "n/a"))
        return result
    threads = torch.get_num_threads()
    load_start = os.getloadavg()
    torch.set_num_threads(1)
    try:
        parts = _timed_parts(opts)
        rounds = _rounds(opts)
    finally:
        torch.set_num_threads(threads)
    load_end = os.getloadavg()
    medians = {name: {clock: median(v) for clock, v in t.items()} for name, t in parts.items()}
    steady = {ex: {clock: float(np.mean(v)) for clock, v in t.items()} for ex, t in rounds.items()}
    result.raw = {"parts_s": parts, "medians_s": medians, "round_s": rounds, "steady_round_s": steady,
                  "load_start": load_start, "load_end": load_end, "workload": WORKLOAD,
                  "warmup_rounds": WARMUP_ROUNDS, "targets": {"a": TARGET_A, "b": TARGET_B}}
    _rows(result, medians, steady, load_start, load_end)
    return result


def _rows(result: BenchResult, medians: dict[str, dict[str, float]], steady: dict[str, dict[str, float]],
          load_start: tuple[float, ...], load_end: tuple[float, ...]) -> None:
    """The table: wall time measured, CPU time beside it; each verdict on CPU time (the process's own work,
    which a shared machine's load does not stretch) and on wall time."""
    def both(values: dict[str, float]) -> str:
        return f"{fmt_s(values['wall'])} (CPU {fmt_s(values['cpu'])})"

    def ratio(num: dict[str, float], den: dict[str, float]) -> tuple[float, float]:
        return num["wall"] / den["wall"], num["cpu"] / den["cpu"]

    a, b, kernel, report = (medians[k] for k in ("floor_a", "floor_b", "kernel", "train_compiled"))
    ab, ka, ra = ratio(b, a), ratio(kernel, a), ratio(report, a)
    speedup, round_a = ratio(steady["cohort"], steady["auto"]), ratio(steady["auto"], a)
    rows = [
        ("floor A: every training row forward + backward once, one chain of products (1 thread)",
         both(a), "-", "info", "info"),
        ("floor B: the same dependent SGD steps as a bare batched torch loop (1 thread)",
         both(b), f"floor A {both(a)}", f"{ab[0]:.1f}x A (CPU {ab[1]:.1f}x) / info", "info"),
        ("(a) compiled training of the 30 devices (the kernel alone)", both(kernel), f"floor A {both(a)}",
         f"{ka[0]:.2f}x A (CPU {ka[1]:.2f}x) / <= {TARGET_A:.0f}x A", verdict(max(ka) <= TARGET_A)),
        ("compiled training with its report (train_compiled)", both(report), f"floor A {both(a)}",
         f"{ra[0]:.2f}x A (CPU {ra[1]:.2f}x) / info", "info"),
        ("(b) end-to-end steady round: default in-process path (auto = compiled) vs cohort executor",
         f"default {both(steady['auto'])}", f"cohort {both(steady['cohort'])}",
         f"{speedup[0]:.2f}x (CPU {speedup[1]:.2f}x) / >= {TARGET_B:.0f}x", verdict(min(speedup) >= TARGET_B)),
        ("(c) end-to-end steady round of the default path against floor A", both(steady["auto"]),
         f"floor A {both(a)}", f"{round_a[0]:.1f}x A (CPU {round_a[1]:.1f}x) / info (stretch: 3x)", "info"),
    ]
    load = f"load average {load_start[0]:.1f} at the start, {load_end[0]:.1f} at the end"
    for label, measured, baseline, ratio_text, outcome in rows:
        result.rows.append(Row(f"{NAME} {label} [{load}]", measured, baseline, ratio_text, outcome))
