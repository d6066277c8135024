"""What ``term-fl run`` prints: a header, a progress bar, the fairness table at the end.

The header says in words what runs (scenario, strategy and its parameters,
data, engine, where clients train, seed); :class:`RoundProgress` is a rich
progress bar over the rounds with elapsed and remaining time and the current
device mean and worst 10%; :class:`RoundPrinter` prints one line per round
instead (``-v``, where Flower's and Ray's logs interleave with it).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.logging import RichHandler
from rich.padding import Padding
from rich.progress import BarColumn, Progress, ProgressColumn, SpinnerColumn, Task, TaskProgressColumn, TextColumn
from rich.table import Column, Table
from rich.text import Text

from term_fl.config import Scenario, executor_of
from term_fl.maths.fairness import STATISTICS, flagged, statistic

if TYPE_CHECKING:  # the server loop imports Flower and torch: `term-fl runs` needs neither
    from term_fl.federation.loop import RoundRecord


PLAIN_WIDTH = 1000
"""Columns of plain output (a pipe, a log file): wide enough that no command or path is wrapped."""


def make_console() -> Console:
    """The console of ``run`` and ``sweep``: a terminal's own width; elsewhere lines that are not wrapped."""
    console = Console(stderr=False, highlight=False)
    if not console.is_terminal:
        console = Console(stderr=False, highlight=False, width=PLAIN_WIDTH)
    return console


def better(key: str) -> str:
    """'higher' or 'lower': which way a statistic is better (:attr:`~term_fl.maths.fairness.Statistic.direction`)."""
    return "higher" if statistic(key).direction > 0 else "lower"


DIRECTIONS = ("better: which way each statistic is better. VaR, CVaR, EVaR, TiVaR: risks of the device losses "
              "(lower is better); variance x 1e4: the variance of the device accuracies times 10^4 (q-FFL's unit); "
              "Gini: inequality of the device accuracies (0: all equal); entropy: of the accuracies' shares "
              "(log K when all are equal)")
"""What the ``better`` column and the statistics that need a word mean, under every table of statistics."""


def next_steps(db: Path, scenario: str, run_id: str | None = None) -> list[str]:
    """The commands that show what a run or a sweep just stored: the dashboard and the report, on this store."""
    import shlex

    store, name = shlex.quote(str(db)), shlex.quote(scenario)
    lines = ["next: the same comparison in a browser, or in one HTML file:",
             f"  term-fl dashboard --db {store}    (then open /compare?scenario={scenario})",
             f"  term-fl report {name} --out {shlex.quote(scenario + '-report.html')} --db {store}"]
    if run_id:
        lines.append(f"  term-fl report {shlex.quote(run_id)} --out {shlex.quote(run_id + '.html')} --db {store}"
                     "    (this run alone)")
    return lines


def _from_term_fl(record: logging.LogRecord) -> bool:
    """A record logged by term-fl's own code (its strategies log through Flower's logger, as Flower's do)."""
    return record.pathname.startswith(_PACKAGE_DIR)


_PACKAGE_DIR = str(Path(__file__).resolve().parents[1])  # term_fl/


def route_logs(console: Console, verbose: bool) -> None:
    """Decide what the command line's logs show, and print them through ``console``.

    By default only warnings and errors of term-fl's own code are shown (a
    node excluded from a round, a failed round), above the progress bar;
    Flower's and Ray's own log lines are not (the engine forwards Ray's worker
    logs only when Flower's logger shows INFO). ``verbose`` shows term-fl's and
    Flower's INFO lines and Ray's worker logs, through Flower's own handler.
    """
    from flwr.common.logger import console_handler

    flwr_logger, own = logging.getLogger("flwr"), logging.getLogger("term_fl")
    handler = RichHandler(console=console, show_time=False, show_path=False, markup=False)
    own.handlers[:] = [handler]
    if verbose:
        flwr_logger.setLevel(logging.INFO)
        own.setLevel(logging.INFO)
        return
    flwr_logger.setLevel(logging.WARNING)
    own.setLevel(logging.WARNING)
    ours = RichHandler(console=console, show_time=False, show_path=False, markup=False)
    ours.addFilter(_from_term_fl)
    flwr_logger.removeHandler(console_handler)
    flwr_logger.addHandler(ours)


ENGINES = {
    "flower": "Flower Simulation Engine (Ray)",
    "inprocess": "in-process engine (no Ray)",
}


def _value(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def strategy_words(scenario: Scenario) -> str:
    """'TERM: t=1, lam=1, ...': the strategy and the parameters that shape it."""
    params = dict(scenario.strategy_params())
    if not params.get("tau"):
        params.pop("tau", None)  # no client-side tilt: nothing to say
    from term_fl.strategies.registry import STRATEGIES

    spec = STRATEGIES.get(scenario.strategy.name)
    label = spec.label if spec else scenario.strategy.name
    if not params:
        return label
    return f"{label}: " + ", ".join(f"{key}={_value(value)}" for key, value in params.items())


def clients_words(scenario: Scenario) -> str:
    """Where the clients train: 'clients train on the CPU' / 'on CUDA (4 clients per GPU)'."""
    from term_fl.learning.training import resolve_device

    try:
        device = resolve_device(scenario.client.device)
    except (RuntimeError, ValueError) as exc:
        return f"clients: {exc}"
    together = {"cohort": ", a round's clients together (cohort executor)",
                "compiled": ", a round's clients together in one compiled kernel (compiled executor)",
                }.get(executor_of(scenario), "")
    if device.type == "cpu":
        return f"clients train on the CPU{together}"
    share = scenario.resources.num_gpus
    per_gpu = f", {1 / share:g} clients per GPU" if scenario.run.engine == "flower" and share else ""
    return f"clients train on CUDA ({device}{per_gpu}){together}"


def run_header(scenario: Scenario, num_devices: int) -> Group:
    """The lines printed before a run: what runs, in words."""
    from term_fl.data.registry import DATASETS

    r = scenario.run
    data = DATASETS[scenario.data.name].describe(scenario.data.settings)
    per_round = min(r.clients_per_round, num_devices)
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column()
    grid.add_row("strategy", strategy_words(scenario))
    grid.add_row("data", f"{data}, {num_devices} devices, {per_round} trained per round, {r.rounds} rounds, "
                          f"model {scenario.model.name}")
    grid.add_row("engine", f"{ENGINES.get(r.engine, r.engine)}; {clients_words(scenario)}")
    title = Text.from_markup(f"[bold]term-fl run[/]  scenario [cyan]{scenario.name}[/], seed {r.seed}")
    return Group(title, Padding(grid, (0, 0, 0, 2)))


PROGRESS = (*flagged("tradeoff", "x"), *flagged("lift"))
"""The statistics of the progress line: the trade-off's x (device mean) and the lift (worst 10%)."""


def _round_stats(record: RoundRecord) -> str:
    test = record.stats.get("test") or {}
    parts = []
    if test:
        parts += [f"{statistic(key).label} {test.get(key, float('nan')):.4f}" for key in PROGRESS]
    if record.status != "ok":
        parts.append(f"round {record.server_round} FAILED")
    if record.excluded:
        parts.append(f"{len(record.excluded)} replies excluded")
    return "  ".join(parts)


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "-:--:--"
    seconds = int(max(0.0, seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class _TimeColumn(ProgressColumn):
    """'0:00:12 < 0:00:30': elapsed, and remaining while rounds remain."""

    def __init__(self) -> None:
        super().__init__(table_column=Column(no_wrap=True))

    def render(self, task: Task) -> Text:
        text = _clock(task.elapsed)
        if not task.finished:
            text += f" < {_clock(task.time_remaining)}"
        return Text(text, style="progress.elapsed")


class RoundProgress:
    """A progress bar over a run's rounds (a context manager and an ``on_round`` callback).

    Before the first round it says the engine is starting (Ray, node
    discovery); then round k of N, elapsed and remaining time, and the test
    split's device mean and worst 10% in the last round. On a terminal it
    redraws in place; elsewhere (a pipe, a log file) it prints its state as a
    line after the first round, at every ``steps``-th part of the rounds (every
    tenth by default; a sweep of many runs asks for 1: the first and the last
    round), and at a failed round.
    """

    STEPS = 10

    def __init__(self, console: Console, rounds: int, label: str = "", steps: int = STEPS) -> None:
        if steps < 1:
            raise ValueError(f"steps = {steps}; allowed: an integer >= 1")
        self.console = console
        self.steps = steps
        self.label = f"{label} " if label else ""
        columns: list[str | ProgressColumn] = [
            SpinnerColumn(finished_text="[green]done[/]"),
            TextColumn("{task.description}"),
            BarColumn(bar_width=None),
            TaskProgressColumn(),
            _TimeColumn(),
            TextColumn("{task.fields[stats]}", table_column=Column(no_wrap=True)),
        ]
        self._live = console.is_terminal
        self._progress = Progress(*columns, console=console, expand=False, disable=not self._live)
        self._task = self._progress.add_task(f"{self.label}starting", total=rounds, stats="")
        self._step = 0

    def __enter__(self) -> RoundProgress:
        self._progress.start()
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is not None:  # the error says what happened; a half-drawn bar would not
            self._progress.update(self._task, visible=False)
        self._progress.stop()

    def __call__(self, record: RoundRecord, rounds: int) -> None:
        self._progress.update(
            self._task,
            completed=record.server_round,
            total=rounds,
            description=f"{self.label}round {record.server_round}/{rounds}",
            stats=_round_stats(record),
        )
        step = record.server_round * self.steps // rounds
        if not self._live and (step > self._step or record.server_round == 1 or record.status != "ok"):
            self._step = step
            self.console.print(self._line(), soft_wrap=True)

    def _line(self) -> str:
        """The bar's state as one plain line (for output that is not a terminal)."""
        task = self._progress.tasks[0]
        left = "" if task.finished else f", {_clock(task.time_remaining)} left"
        return (f"{task.description}  {task.percentage:.0f}%  {_clock(task.elapsed)} elapsed{left}  "
                f"{task.fields['stats']}").rstrip()


class RoundPrinter:
    """Prints 'round k/N' with the current device mean and worst 10%, one line per round."""

    def __init__(self, console: Console, label: str = "") -> None:
        self.console = console
        self.label = f"{label} " if label else ""

    def __call__(self, record: RoundRecord, rounds: int) -> None:
        parts = [f"{self.label}round {record.server_round}/{rounds}", _round_stats(record), f"{record.duration_s:.2f}s"]
        self.console.print("  ".join(p for p in parts if p))
        sys.stdout.flush()


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def fairness_table(title: str, by_split: Mapping[str, Mapping[str, Any] | None]) -> Table:
    """A statistic x split table of one run's last round."""
    table = Table(title=title, caption=DIRECTIONS)
    table.add_column("statistic", no_wrap=True)
    table.add_column("better")
    splits = [s for s, v in by_split.items() if v]
    for split in splits:
        table.add_column(split, justify="right")
    for stat in STATISTICS:
        table.add_row(stat.label, better(stat.key), *(_fmt(by_split[s].get(stat.key)) for s in splits))
    return table


def reference_table(scenario: Any, run: Mapping[str, Any], references: Sequence[Mapping[str, Any]]) -> Table:
    """One run beside its reference runs (same seed and settings): every test statistic and the differences.

    One column per run, then the run's difference to each reference (one
    seed: plain differences). The caption says whether each reference
    converged (its validation device mean over the last fifth of the rounds)
    and that one seed is one sample: ``term-fl sweep`` gives seeds and
    standard errors.
    """
    from term_fl.strategies.registry import cell_label  # Flower: only where a run is compared

    names = [cell_label(summary.get("strategy") or {}) for summary in (run, *references)]
    tests = [summary.get("test") or {} for summary in (run, *references)]
    which = "reference" if len(references) == 1 else "references"
    table = Table(title=f"{scenario.name}: {names[0]} and its {which} {', '.join(names[1:])}, seed {run.get('seed')}, "
                        f"test split, round {run.get('evaluated_round')}")
    table.add_column("statistic", no_wrap=True)
    table.add_column("better")
    for name in names:
        table.add_column(name, justify="right")
    for name in names[1:]:
        table.add_column(f"{names[0]} - {name}", justify="right")
    for stat in STATISTICS:
        values = [test.get(stat.key) for test in tests]
        diffs = [_difference(values[0], value) for value in values[1:]]
        table.add_row(stat.label, better(stat.key), *(_fmt(value) for value in values), *diffs)
    lines = [_convergence_line(name, summary) for name, summary in zip(names[1:], references, strict=True)]
    worst = [worst_devices_line(name, summary) for name, summary in zip(names, (run, *references), strict=True)]
    table.caption = "\n".join(line for line in (DIRECTIONS, *worst, *lines, ONE_SEED) if line)
    return table


def worst_devices_line(name: str, summary: Mapping[str, Any], split: str = "test") -> str:
    """Which devices make ``name``'s worst 10% on ``split``, each with its accuracy and its number of samples
    there (a device with 1 test sample scores 0 or 1)."""
    devices = (summary.get("worst_10_devices") or {}).get(split) or []
    if not devices:
        return ""
    words = ", ".join(f"{d['partition_id']}: {d['accuracy']:.2f} on {d['examples']}" for d in devices)
    return f"{name}'s worst 10% on {split} (device: accuracy on its samples): {words}"


def _difference(a: Any, b: Any) -> str:
    """``a - b`` with its sign, or "-" where one of them is not a number."""
    ok = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (a, b))
    return f"{a - b:+.4f}" if ok else "-"


ONE_SEED = ("one seed: `term-fl sweep` runs the scenario's seeds and reports paired differences "
            "with standard errors")


def _convergence_line(name: str, summary: Mapping[str, Any]) -> str:
    convergence = summary.get("convergence") or {}
    change = convergence.get("last_fifth_change")
    if change is None:
        return ""
    verdict = "flat: converged" if convergence.get("flat") else "not flat: more rounds may change the comparison"
    return f"{name}'s validation device mean changed {change:+.4f} over the last fifth of the rounds ({verdict})"
