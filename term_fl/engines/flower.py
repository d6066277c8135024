"""Flower's Simulation Engine (Ray) driving the shared server loop.

The linear message dispatcher of :mod:`term_fl.flower_internals` replaces
Flower 1.42's (nodes x messages per poll) while a simulation runs.

``run_flower_simulation`` starts a private Ray instance (own temp folder, no
usage stats, no dashboard), runs ``term_fl.federation.run_federation`` as the
ServerApp and ``term_fl.client_app.app`` on ``num_nodes`` virtual
SuperNodes, and shuts Ray down afterwards, whatever happened, so nothing is
left running.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from flwr.app import Context, Message
from flwr.serverapp import Grid, ServerApp

from term_fl.engines.client_cache import app as client_app
from term_fl.config import Scenario
from term_fl.engines.watchdog import orphan_guard
from term_fl.extras import require
from term_fl.flower_internals import ActorReuse, linear_dispatcher, reusing_client_actors
from term_fl.federation import FederationError, FederationResult, Recorder, RoundRecord, run_federation

log = logging.getLogger("term_fl")

RAY_PURPOSE = "Flower's Simulation Engine (run.engine = 'flower'; --engine inprocess needs no Ray)"

QUIET_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "RAY_DEDUP_LOGS": "0",
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
}


def cuda_device_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def client_resources(scenario: Scenario) -> dict[str, float]:
    """Resources of one virtual client: from the scenario, else from the machine.

    On a machine without a GPU no GPU is requested (asking for a fraction of a
    GPU there leaves Ray's actor pool empty); with GPUs, four clients share one.
    """
    gpus = cuda_device_count()
    num_gpus = scenario.resources.num_gpus
    if num_gpus is None:
        num_gpus = 0.25 if gpus and scenario.client.device != "cpu" else 0.0
    if num_gpus > 0 and not gpus:
        raise FederationError(
            f"resources.num_gpus = {num_gpus} but this machine has no CUDA GPU; set it to 0"
        )
    num_cpus = scenario.resources.num_cpus or 1.0
    return {"num_cpus": float(num_cpus), "num_gpus": float(num_gpus)}


def backend_config(scenario: Scenario, ray_temp_dir: str) -> dict[str, Any]:
    cores = os.cpu_count() or 1
    return {
        "client_resources": client_resources(scenario),
        "init_args": {
            "num_cpus": cores,
            "num_gpus": cuda_device_count(),
            "include_dashboard": False,
            "_temp_dir": ray_temp_dir,
            "logging_level": logging.ERROR,
            "log_to_driver": True,
        },
    }


_session: dict[str, Any] = {}


@contextmanager
def ray_session(scenario: Scenario) -> Iterator[None]:
    """Keep one Ray instance and one pool of ClientApp actors alive across simulations.

    For a sweep or a test module. Flower 1.42's Ray backend starts Ray only
    when it is not running, but starts new ClientApp actors for every
    simulation and shuts Ray down after it. Inside this context a simulation
    reuses the previous one's actors when they ask for the same resources and
    all came back idle (:func:`term_fl.flower_internals.reusing_client_actors`:
    each actor process keeps its imports and the ClientApp's per-process
    caches, which never change a reply), and leaves them running at its end.
    Ray and the last actors are shut down once, at the end. Nested sessions
    are no-ops.
    """
    require("sim", "ray", purpose=RAY_PURPOSE)
    import ray

    if _session:
        yield
        return
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    temp_dir = tempfile.mkdtemp(prefix="tfl-ray-", dir="/tmp")
    guard = orphan_guard(temp_dir)  # Ray's agents and workers outlive a driver killed with SIGKILL
    watchdog = guard.__enter__()
    interrupted = False
    try:
        # The arguments Flower's RayBackend.init_ray would use.
        pythonpath = os.pathsep.join(filter(None, [os.pathsep.join(sys.path), os.environ.get("PYTHONPATH")]))
        os.environ["PYTHONPATH"] = pythonpath
        ray.init(runtime_env={"env_vars": {"PYTHONPATH": pythonpath}}, **backend_config(scenario, temp_dir)["init_args"])
        with reusing_client_actors() as reuse, linear_dispatcher():
            _session.update(temp_dir=temp_dir, reuse=reuse)
            yield
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        _session.clear()
        stopped = shutdown_ray(INTERRUPTED_SHUTDOWN_S if interrupted else SHUTDOWN_S)
        if watchdog is not None:
            watchdog.keep = not stopped
        guard.__exit__(None, None, None)
        shutil.rmtree(temp_dir, ignore_errors=True)


def actors_reused() -> int:
    """How many simulations of the current ``ray_session`` reused the previous one's actors."""
    reuse: ActorReuse | None = _session.get("reuse")
    return 0 if reuse is None else reuse.reused


class StoppableGrid(Grid):
    """Flower's Grid, with every wait of the server loop ending early once ``stop`` is set.

    Replies are pulled every ``poll_s`` (10 ms) rather than every 100 ms.

    Flower's Simulation Engine runs the ServerApp in a thread of its own. On
    Ctrl-C the main thread stops the engine, but the server loop would sit in
    ``send_and_receive`` until ``run.round_timeout`` and then go on with
    failed rounds: with this wrapper it raises ``KeyboardInterrupt`` within a
    poll interval instead, so ``run_federation`` records the run as
    interrupted and the thread ends. Everything else is delegated.
    """

    def __init__(self, grid: Grid, stop: threading.Event, poll_s: float = 0.01) -> None:
        self._grid = grid
        self._stop = stop
        self._poll_s = poll_s  # Flower's grid pulls every 0.1 s: up to 0.1 s more per phase

    def _check(self) -> None:
        if self._stop.is_set():
            raise KeyboardInterrupt("the simulation was stopped")

    def set_run(self, run: Any) -> None:  # noqa: D102
        self._grid.set_run(run)

    @property
    def run(self) -> Any:  # noqa: D102
        return self._grid.run

    def create_message(self, *args: Any, **kwargs: Any) -> Message:  # noqa: D102
        return self._grid.create_message(*args, **kwargs)

    def get_node_ids(self) -> Iterable[int]:  # noqa: D102
        self._check()
        return self._grid.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:  # noqa: D102
        self._check()
        return self._grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:  # noqa: D102
        return self._grid.pull_messages(message_ids)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        """Flower's ``send_and_receive`` (push, then pull until every reply or the timeout), stoppable."""
        pending = set(self.push_messages(messages))
        end = None if timeout is None else time.monotonic() + timeout
        replies: list[Message] = []
        while pending:
            self._check()
            received = list(self.pull_messages(pending))
            replies.extend(received)
            pending.difference_update(m.metadata.reply_to_message_id for m in received)
            if not pending or (end is not None and time.monotonic() >= end):
                break
            time.sleep(self._poll_s)
        return replies


# How long Ctrl-C waits for the server loop to record the run as interrupted,
# and then for Ray to shut down; what Ray leaves after that, the watchdog
# (term_fl.engines.watchdog) ends once the process exits (term_fl.cli.entry
# exits without joining Flower's threads). Together well under 5 s.
STOP_GRACE_S = 2.0
INTERRUPTED_SHUTDOWN_S = 1.5
SHUTDOWN_S = 60.0


def shutdown_ray(timeout: float) -> bool:
    """``ray.shutdown()``, waiting at most ``timeout`` s; whether it completed.

    After Ctrl-C one of Flower's worker threads may still block in
    ``ray.get()``, and ``ray.shutdown()`` can then hang: it runs in a daemon
    thread so the caller can give up on it.
    """
    import ray

    if not ray.is_initialized():
        return True
    done = threading.Event()

    def shutdown() -> None:
        ray.shutdown()
        done.set()

    threading.Thread(target=shutdown, name="term-fl-ray-shutdown", daemon=True).start()
    return done.wait(timeout)


def run_flower_simulation(
    scenario: Scenario,
    num_nodes: int,
    recorder: Recorder | None = None,
    *,
    on_round: Callable[[RoundRecord, int], None] | None = None,
) -> FederationResult:
    """Run a scenario in Flower's Simulation Engine and return the server loop's result."""
    require("sim", "ray", purpose=RAY_PURPOSE)
    import ray
    from flwr.simulation import run_simulation

    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    outcome: dict[str, Any] = {}
    server_app = ServerApp()
    stop, server_done = threading.Event(), threading.Event()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        try:
            outcome["result"] = run_federation(StoppableGrid(grid, stop), scenario, recorder, on_round=on_round)
        except BaseException as exc:  # re-raised in the caller's thread below
            outcome["error"] = exc
        finally:
            server_done.set()

    in_session = bool(_session)
    ray_temp_dir = _session.get("temp_dir") or tempfile.mkdtemp(prefix="tfl-ray-", dir="/tmp")
    guard = contextlib.nullcontext() if in_session else orphan_guard(ray_temp_dir)
    watchdog = guard.__enter__()  # Ray's agents and workers outlive a driver killed with SIGKILL
    interrupted = False
    try:
        with linear_dispatcher():
            run_simulation(
                server_app=server_app,
                client_app=client_app,
                num_supernodes=num_nodes,
                backend_config=backend_config(scenario, ray_temp_dir),
            )
    except KeyboardInterrupt:
        # Ctrl-C reaches this (main) thread; the server loop runs in Flower's
        # ServerApp thread: stop it and let it record the run as interrupted.
        interrupted = True
        stop.set()
        server_done.wait(STOP_GRACE_S)
        raise
    finally:
        if not in_session:
            stopped = shutdown_ray(INTERRUPTED_SHUTDOWN_S if interrupted else SHUTDOWN_S)
            if watchdog is not None:
                watchdog.keep = not stopped  # the watchdog ends what is left once this process exits
            shutil.rmtree(ray_temp_dir, ignore_errors=True)
        guard.__exit__(None, None, None)
    if "error" in outcome:
        raise outcome["error"]
    if "result" not in outcome:
        raise FederationError("the Flower simulation ended without running the server loop (see the log above)")
    return outcome["result"]
