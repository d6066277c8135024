"""A group of runs as one batched computation: several runs side by side, their training in one compiled call per round.

:func:`run_group` runs the scenarios of one group on the in-process engine
in lockstep, each with its own grid, strategy, seeds, sampling, statistics
and recorder (the server loop of every run is
:func:`term_fl.federation.loop.federation_steps`, unchanged). Whenever
every run waits on an exchange, the training batches of all of them are
trained in one call of the compiled kernel
(:func:`term_fl.learning.compiled_training.train_compiled_group`): the
kernel trains each device on its own, so each run gets, bit for bit, the
replies it gets alone. Everything else (evaluation, a batch the kernel does
not take) is answered run by run by the run's own grid.

The runs of a group share what the kernel needs to be shared
(:func:`group_key`): the in-process engine, the compiled executor on the
CPU, one model (name and settings), one set of client settings and one
shape of data (the data settings but the seed). Their training rows are
stacked once into one array, of which each run's executor holds a view.

A group is the unit of work a sweep hands out (``term-fl sweep
--group-size``): its input is the group's scenarios, its output each run's
rounds, streamed to the run's recorder as they end.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import secrets
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from term_fl.clientapp.app import Setting, make_client_app
from term_fl.clientapp.cache import ClientCache
from term_fl.config import Scenario, check_fits_dataset, executor_of
from term_fl.config.scenario import COMPILED_MODELS
from term_fl.data import dataset_for
from term_fl.engines.cohort_executor import FederationTensors, Prepared
from term_fl.engines.compiled_executor import CompiledExecutor
from term_fl.engines.inprocess import InProcessGrid, answering
from term_fl.federation.loop import FederationResult, Recorder, RoundRecord, federation_steps
from term_fl.federation.rounds import Exchange, RoundSteps, answer
from term_fl.learning.compiled_training import compiler_available, train_compiled_group
from term_fl.learning.models import model_for
from term_fl.learning.threads import single_threaded

__all__ = ["GroupRun", "group_key", "run_group"]

log = logging.getLogger("term_fl")

Outcome = FederationResult | BaseException
"""A run's end: its result, or the exception it stopped with (recorded by its recorder)."""


def group_key(scenario: Scenario) -> str | None:
    """What the runs of one group share (as a string), or None when the scenario cannot join a group.

    A group needs the in-process engine, the compiled executor (``auto`` on
    a linear model, or named) with numba installed, clients on the CPU, and
    in common the model, the client settings and the data but its seed.
    """
    c = scenario.client
    if (scenario.run.engine != "inprocess" or executor_of(scenario) != "compiled"
            or scenario.model.name not in COMPILED_MODELS or c.device not in ("cpu", "auto")
            or (c.device == "auto" and torch.cuda.is_available()) or not compiler_available()):
        return None
    data = scenario.data.model_dump(mode="json")
    data.pop("seed", None)
    return json.dumps({"data": data, "model": scenario.model.model_dump(mode="json"),
                       "client": c.model_dump(mode="json")}, sort_keys=True)


@dataclasses.dataclass
class GroupRun:
    """One run of a group: its grid, its executor, its steps, and where its rows start in the shared array."""

    grid: InProcessGrid
    executor: CompiledExecutor
    steps: RoundSteps[FederationResult]
    offset: int = 0
    waiting: Exchange | None = None


@dataclasses.dataclass
class _Group:
    """The runs of a group and their stacked training rows (features, labels) as numpy arrays."""

    runs: list[GroupRun]
    x: np.ndarray
    y: np.ndarray
    together: bool = True  # False once a call for the whole group failed: then each run trains on its own


def run_group(
    scenarios: Sequence[Scenario],
    recorders: Sequence[Recorder],
    *,
    on_round: Callable[[int, RoundRecord, int], None] | None = None,
) -> list[Outcome]:
    """Run ``scenarios`` side by side, each round's training of all of them in one compiled call.

    Parameters
    ----------
    scenarios : sequence of Scenario
        The group: every :func:`group_key` the same (ValueError otherwise).
    recorders : sequence of Recorder
        One per scenario: each hears its run's start, rounds and end, as
        :func:`term_fl.federation.loop.run_federation` tells them.
    on_round : callable, optional
        Called with the run's index, the round's record and the run's rounds.

    Returns
    -------
    list
        Each run's :class:`~term_fl.federation.loop.FederationResult`, or the
        exception it stopped with (its recorder recorded it as failed). A
        KeyboardInterrupt stops every run (each recorded as interrupted) and is raised.
    """
    keys = {group_key(s) for s in scenarios}
    if len(recorders) != len(scenarios) or None in keys or len(keys) > 1:
        raise ValueError("run_group needs one recorder per scenario and scenarios of one group (group_key); got "
                         f"{len(scenarios)} scenarios, {len(recorders)} recorders, {len(keys)} distinct keys")
    outcomes: dict[int, Outcome] = {}
    with contextlib.ExitStack() as stack, single_threaded():
        group = _start(scenarios, recorders, on_round, stack)
        for i in range(len(group.runs)):
            _advance(group.runs, outcomes, i, lambda steps: next(steps))
        while any(run.waiting is not None for run in group.runs):
            _answer_all(group, outcomes)
    return [outcomes[i] for i in range(len(scenarios))]


def _start(
    scenarios: Sequence[Scenario],
    recorders: Sequence[Recorder],
    on_round: Callable[[int, RoundRecord, int], None] | None,
    stack: contextlib.ExitStack,
) -> _Group:
    """Each run's dataset, client cache, compiled executor and grid (entered; one Flower run for all), and steps."""
    run_id = secrets.randbits(63)
    runs, settings = [], []
    for i, (scenario, recorder) in enumerate(zip(scenarios, recorders, strict=True)):
        dataset = dataset_for(scenario)
        check_fits_dataset(scenario, dataset.num_devices)
        cache = ClientCache()
        executor = CompiledExecutor(cache)
        grid = stack.enter_context(InProcessGrid(make_client_app(cache), dataset.num_devices, executor=executor,
                                                 run_id=run_id))
        report = None if on_round is None else (lambda record, rounds, i=i: on_round(i, record, rounds))
        steps = federation_steps(grid, scenario, recorder, on_round=report, dataset=dataset)
        runs.append(GroupRun(grid, executor, steps))
        settings.append(cache.setting(scenario.to_json()))  # the setting its messages will name
    return _share_rows(runs, settings)


def _share_rows(runs: list[GroupRun], settings: Sequence[Setting]) -> _Group:
    """Stack every run's training rows into one array once; each run's executor keeps its part as a view."""
    parts = [FederationTensors.build(s.dataset, model_for(s.scenario, s.dataset), s.device) for s in settings]
    x = torch.cat([tensors.x_train for tensors in parts])
    y = torch.cat([tensors.y_train for tensors in parts])
    offset = 0
    for run, setting, tensors in zip(runs, settings, parts, strict=True):
        n = tensors.x_train.shape[0]
        run.offset = offset
        run.executor.use_tensors(setting, dataclasses.replace(tensors, x_train=x[offset:offset + n],
                                                              y_train=y[offset:offset + n]))
        offset += n
    return _Group(runs, x.numpy(), y.numpy())


def _advance(runs: list[GroupRun], outcomes: dict[int, Outcome], i: int,
             step: Callable[[RoundSteps[FederationResult]], Exchange]) -> None:
    """Move run ``i`` to its next exchange (or its end); a KeyboardInterrupt ends every run, then is raised."""
    run = runs[i]
    run.waiting = None
    try:
        run.waiting = step(run.steps)
    except StopIteration as stop:
        outcomes[i] = stop.value
    except KeyboardInterrupt:
        _interrupt(runs, outcomes, exclude=i)
        raise
    except Exception as exc:  # noqa: BLE001 - the run recorded its failure; the others go on
        outcomes[i] = exc


def _interrupt(runs: list[GroupRun], outcomes: dict[int, Outcome], exclude: int) -> None:
    """Stop every other waiting run with a KeyboardInterrupt where it waits: each records itself interrupted."""
    for j, other in enumerate(runs):
        if j != exclude and other.waiting is not None:
            other.waiting = None
            with contextlib.suppress(KeyboardInterrupt, StopIteration):
                other.steps.throw(KeyboardInterrupt())
            outcomes[j] = KeyboardInterrupt()


def _answer_all(group: _Group, outcomes: dict[int, Outcome]) -> None:
    """Answer every waiting run: the training batches together, the rest by each run's own grid."""
    runs = group.runs
    waiting = [i for i, run in enumerate(runs) if run.waiting is not None]
    try:
        together = _train_together(group, waiting)
    except KeyboardInterrupt:
        _interrupt(runs, outcomes, exclude=-1)
        raise
    for i in waiting:
        request = runs[i].waiting
        assert request is not None
        if i in together:
            replies: Any = together[i]
        else:
            try:
                replies = answer(request)
            except KeyboardInterrupt:
                _interrupt(runs, outcomes, exclude=-1)
                raise
            except Exception as exc:  # noqa: BLE001 - thrown into the run where it waits: it records and re-raises
                _advance(runs, outcomes, i, lambda steps, exc=exc: steps.throw(exc))
                continue
        _advance(runs, outcomes, i, lambda steps, replies=replies: steps.send(replies))


def _train_together(group: _Group, waiting: Sequence[int]) -> dict[int, Any]:
    """The replies of the waiting runs' train batches that the kernel takes, from one compiled call.

    A run whose batch is not such (evaluation, a declined batch) is left
    out; if the call fails, every run is left out and answers on its own.
    """
    prepared: dict[int, Prepared] = {}
    tasks = {}
    for i in waiting if group.together else ():
        run = group.runs[i]
        request = run.waiting
        assert request is not None
        ready = run.executor.prepare_training(request.messages, run.grid.contexts)
        task = None if ready is None else run.executor.compiled_task(ready, run.offset)
        if task is not None:
            prepared[i], tasks[i] = ready, task
    if not tasks:
        return {}
    c = prepared[next(iter(prepared))].setting.scenario.client  # the group's client settings (group_key)
    try:
        with answering():
            trainings = train_compiled_group(list(tasks.values()), group.x, group.y, lr=c.lr, epochs=c.epochs,
                                             batch_size=c.batch_size, weight_decay=c.weight_decay, tau=c.tau)
    except Exception as exc:  # noqa: BLE001 - each run then answers on its own, for the rest of the group
        group.together = False
        log.warning("group: training the group together failed (%s: %s); each run trains on its own from now on",
                    type(exc).__name__, exc)
        return {}
    return {i: prepared[i].replies(training) for i, training in zip(tasks, trainings, strict=True)}
