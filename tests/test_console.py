"""What `term-fl run` prints: the header in words, the progress bar, and which log lines reach the console."""

from __future__ import annotations

import io
import logging
import re

import pytest
from rich.console import Console
from rich.markup import escape

from conftest import small_scenario
from term_fl.cli.console import RoundProgress, route_logs, run_header, strategy_words
from term_fl.federation.loop import RoundRecord


def text_console(terminal: bool = False, width: int = 200) -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, force_terminal=terminal, width=width, highlight=False, color_system=None), buffer


def record(k: int, mean: float = 0.5, worst: float = 0.25, status: str = "ok", excluded: int = 0) -> RoundRecord:
    return RoundRecord(k, status, [], [], {"test": {"mean": mean, "worst_10": worst, "pooled_mean": 0.9}}, None, 0.1,
                       [{"partition_id": i} for i in range(excluded)])


@pytest.mark.parametrize(
    "overrides, words",
    [
        (["strategy.name=term", "strategy.t=-2", "strategy.lam=0.5"],
         "TERM: t=-2, lam=0.5, base_weighting=num_examples, loss_reduction=mean, server_lr=1, "
         "loss_transform=median_mad, loss_clip=3"),  # t < 0: the default transform is named
        (["strategy.name=term", "strategy.t=2"],
         "TERM: t=2, lam=1, base_weighting=num_examples, loss_reduction=mean, server_lr=1"),
        (["strategy.name=qffl", "strategy.q=5", "client.lr=0.05"], "q-FFL: q=5, loss_reduction=mean, client_lr=0.05"),
        (["strategy.name=fedavg"], "FedAvg"),
        (["strategy.name=fedavg", "client.tau=-1"], "FedAvg: tau=-1"),  # a client-side tilt is named
    ],
)
def test_the_strategy_is_named_with_its_parameters_in_words(overrides, words):
    assert strategy_words(small_scenario(*overrides)) == words


def test_the_header_names_scenario_seed_strategy_data_engine_and_device():
    console, out = text_console()
    console.print(run_header(small_scenario("run.seed=7", "run.engine=flower", "client.device=cpu"), 6))
    text = " ".join(out.getvalue().split())
    assert "term-fl run scenario default, seed 7" in text
    assert "strategy TERM: t=1" in text
    assert "data Synthetic(1, 1), 6 devices, 3 trained per round, 3 rounds, model logreg" in text
    assert "engine Flower Simulation Engine (Ray); clients train on the CPU" in text


def test_off_a_terminal_progress_is_a_line_after_round_1_each_tenth_of_the_rounds_and_failed_rounds():
    console, out = text_console(terminal=False)
    with RoundProgress(console, 100) as progress:
        for k in range(1, 101):
            progress(record(k, status="failed" if k == 55 else "ok", excluded=2 if k == 55 else 0), 100)
    lines = out.getvalue().splitlines()
    assert [line.split()[1] for line in lines] == [f"{k}/100" for k in (1, 10, 20, 30, 40, 50, 55, 60, 70, 80, 90, 100)]
    assert "round 55 FAILED" in lines[6] and "2 replies excluded" in lines[6]
    assert lines[1].startswith("round 10/100  10%  ") and "left" in lines[1]
    assert lines[-1].startswith("round 100/100  100%  ") and "left" not in lines[-1]
    assert "device mean 0.5000  worst 10% 0.2500" in lines[-1]


def test_with_one_step_off_a_terminal_progress_is_the_first_and_last_round_and_failed_rounds():
    console, out = text_console(terminal=False)
    with RoundProgress(console, 50, label=escape("[cell 2/9] term t=3 seed=1"), steps=1) as progress:
        for k in range(1, 51):
            progress(record(k, status="failed" if k == 7 else "ok"), 50)
    lines = out.getvalue().splitlines()
    assert [line.split()[6] for line in lines] == ["1/50", "7/50", "50/50"]
    assert all(line.startswith("[cell 2/9] term t=3 seed=1 round ") for line in lines)


@pytest.mark.parametrize("steps", [0, -1])
def test_progress_steps_below_one_are_refused(steps):
    console, _ = text_console()
    with pytest.raises(ValueError, match=f"steps = {steps}; allowed: an integer >= 1"):
        RoundProgress(console, 10, steps=steps)


def frames(terminal_output: str) -> list[str]:
    """The lines a terminal was sent, without control sequences (each redraw is a line)."""
    plain = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", terminal_output)
    return [line for line in re.split(r"[\r\n]", plain) if line.strip()]


def test_on_a_terminal_the_bar_ends_showing_the_last_round_and_its_statistics():
    console, out = text_console(terminal=True)
    with RoundProgress(console, 3, label="FedAvg reference") as progress:
        for k in (1, 2, 3):
            progress(record(k, mean=0.1 * k), 3)
    last = frames(out.getvalue())[-1]
    assert "FedAvg reference round 3/3" in last and "100%" in last and "device mean 0.3000" in last
    assert "0:00:00" in last and "<" not in last  # elapsed; nothing remains


@pytest.mark.parametrize("terminal", [True, False])
def test_a_failing_run_leaves_no_half_drawn_bar(terminal):
    console, out = text_console(terminal=terminal)
    with pytest.raises(RuntimeError), RoundProgress(console, 3) as progress:
        raise RuntimeError("Ray could not start")
    assert not any(task.visible for task in progress._progress.tasks)
    assert terminal or out.getvalue() == ""


@pytest.fixture
def restore_logging():
    loggers = [logging.getLogger(name) for name in ("flwr", "term_fl")]
    saved = [(lg.level, list(lg.handlers), list(lg.filters), lg.propagate) for lg in loggers]
    yield
    for lg, (level, handlers, filters, propagate) in zip(loggers, saved):
        lg.setLevel(level)
        lg.handlers[:] = handlers
        lg.filters[:] = filters
        lg.propagate = propagate


def emit(logger: str, level: int, message: str, pathname: str) -> None:
    lg = logging.getLogger(logger)
    if lg.isEnabledFor(level):
        lg.handle(lg.makeRecord(logger, level, pathname, 1, message, (), None))


def test_by_default_only_term_fl_warnings_reach_the_console(restore_logging):
    import term_fl.strategies

    ours = term_fl.strategies.__file__
    console, out = text_console()
    route_logs(console, verbose=False)
    emit("flwr", logging.WARNING, "excluded node 7: NaN loss", ours)  # a term-fl strategy, through Flower's logger
    emit("flwr", logging.WARNING, "Flower's own warning", "/site-packages/flwr/server/x.py")
    emit("flwr", logging.INFO, "a term-fl strategy's INFO line", ours)
    emit("term_fl", logging.WARNING, "round 3 failed", ours)
    emit("term_fl", logging.INFO, "discovered 100 nodes", ours)
    shown = out.getvalue()
    assert "excluded node 7" in shown and "round 3 failed" in shown
    assert "Flower's own warning" not in shown and "INFO line" not in shown and "discovered" not in shown
    assert not logging.getLogger("flwr").isEnabledFor(logging.INFO)  # the engine then keeps Ray's logs away too


def test_verbose_shows_flowers_info_lines(restore_logging):
    console, _ = text_console()
    route_logs(console, verbose=True)
    assert logging.getLogger("flwr").isEnabledFor(logging.INFO)
    assert logging.getLogger("term_fl").isEnabledFor(logging.INFO)


def test_the_reference_table_names_each_runs_worst_devices_with_their_test_sizes():
    """Per-device test sizes beside the worst 10%: a device with 1 test sample scores 0 or 1."""
    from term_fl.cli.console import worst_devices_line

    summary = {"worst_10_devices": {"test": [{"partition_id": 4, "accuracy": 0.0, "examples": 1},
                                             {"partition_id": 9, "accuracy": 0.5, "examples": 12}]}}
    assert worst_devices_line("term t=3", summary) == (
        "term t=3's worst 10% on test (device: accuracy on its samples): 4: 0.00 on 1, 9: 0.50 on 12")
    assert worst_devices_line("fedavg", {}) == ""  # a summary written before 0.3 has none
