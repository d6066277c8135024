"""Flower's Simulation Engine (Ray) driving the shared server loop.

Three patches of the Simulation Engine (:mod:`term_fl.flower_internals`) are
installed when asked for (``TERM_FL_FLOWER_PATCHES``; README, "Flower
versions"): the linear message dispatcher (Flower 1.42's polls cost nodes x
messages), the engine's node table (no query to every node) and the reuse
of ClientApp actors across the simulations of a :func:`ray_session`.

``run_flower_simulation`` starts a private Ray instance (own temp folder, no
usage stats, no dashboard), or joins the cluster of ``run.ray_address``
(:mod:`term_fl.engines.ray_cluster`), runs ``term_fl.federation.loop.run_federation`` as the
ServerApp and ``term_fl.clientapp.app.app`` on ``num_nodes`` virtual
SuperNodes, and shuts its private Ray down afterwards (from a joined
cluster it disconnects), whatever happened, so nothing is left running. Ray is started here, not inside Flower, so that a Ray that
cannot start, or cannot host one client, ends in one
:class:`term_fl.common.errors.EngineStartError` naming the cause within seconds;
an engine that stops during the run ends the server loop at once with an
:class:`EngineError` (the run is recorded as failed).

It calls ``flwr.simulation.run_simulation``, which Flower 1.42 marks as
deprecated in favour of ``flwr run``. ``flwr run`` runs the ServerApp in a
SuperLink process of its own; term-fl's engine needs the server loop in this
process (the progress bar and the recorder are callbacks, a sweep reuses one
Ray instance and its ClientApp actors, Ctrl-C stops the loop within a poll),
so the deprecated call is kept, and the deprecation notice that Flower logs
on every call is dropped for that call alone
(:func:`without_run_simulation_notice`). README, "Flower versions", says
what happens when Flower removes it.
"""

from __future__ import annotations

import copy
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from term_fl.clientapp.cache import app as client_app
from term_fl.common.errors import EngineStartError
from term_fl.common.extras import require
from term_fl.config import Scenario
from term_fl.engines.ray_cluster import check_address, join_args, pythonpath_env
from term_fl.engines.stoppable import Stop, StoppableGrid
from term_fl.engines.watchdog import orphan_guard
from term_fl.federation.loop import (Checkpoint, FederationError, FederationResult, Recorder, RoundRecord,
                                    run_federation)
from term_fl.flower_internals.actors import ActorReuse, reusing_client_actors
from term_fl.flower_internals.dispatcher import linear_dispatcher
from term_fl.flower_internals.identity import preserved_identity
from term_fl.flower_internals.node_table import simulation_node_table

__all__ = [
    "EngineError", "Stop", "StoppableGrid", "actors_reused", "backend_config", "client_resources", "ray_session",
    "run_flower_simulation", "shutdown_ray", "sigterm_handler_kept", "start_ray", "without_run_simulation_notice",
]

log = logging.getLogger("term_fl")

RAY_PURPOSE = "Flower's Simulation Engine (run.engine = 'flower'; --engine inprocess needs no Ray)"

QUIET_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "RAY_DEDUP_LOGS": "0",
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
}


class EngineError(FederationError):
    """The engine stopped during a run (Flower's Simulation Engine, Ray); the run is recorded as failed.

    The message names the cause and a next step. An engine that cannot start
    at all raises :class:`term_fl.common.errors.EngineStartError` instead.
    """


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
    """Flower's backend config: the clients' resources and Ray's ``init`` arguments.

    Ray's own log lines and its workers' output reach this process only when
    Flower's logger shows INFO (``term-fl -v``; Flower's default when used as
    a library), as Flower's own lines do.
    """
    if scenario.run.ray_address:  # a cluster someone started: its resources and temp folder, not this machine's
        return {"client_resources": client_resources(scenario), "init_args": join_args(scenario.run.ray_address)}
    cores = os.cpu_count() or 1
    verbose = logging.getLogger("flwr").isEnabledFor(logging.INFO)
    return {
        "client_resources": client_resources(scenario),
        "init_args": {
            "num_cpus": cores,
            "num_gpus": cuda_device_count(),
            "include_dashboard": False,
            "_temp_dir": ray_temp_dir,
            "logging_level": logging.INFO if verbose else logging.ERROR,
            "log_to_driver": verbose,
        },
    }


def ray_temp_root() -> str:
    """Where Ray's temp folder goes: ``$RAY_TMPDIR`` (Ray's own setting) or /tmp.

    Not $TMPDIR: Ray's socket paths must stay under 107 bytes.
    """
    return os.environ.get("RAY_TMPDIR") or "/tmp"


def _reason(exc: BaseException) -> str:
    """The innermost cause of ``exc``, on one line."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def start_ray(scenario: Scenario, temp_dir: str) -> None:
    """Start this process's Ray instance for ``scenario`` in ``temp_dir``; :class:`EngineStartError` if it cannot.

    Also checks that Ray can host one virtual client: Flower's engine would
    otherwise stop with an empty actor pool after the server loop started.
    The caller shuts Ray down (:func:`shutdown_ray`) whatever happened.
    """
    import ray

    resources = client_resources(scenario)
    address = scenario.run.ray_address
    if address:
        check_address(address, "run.ray_address (--ray-address)")
    try:
        # The arguments Flower's RayBackend.init_ray would use (ray_session restores PYTHONPATH at its end).
        pythonpath = pythonpath_env()
        with sigterm_handler_kept():
            ray.init(runtime_env={"env_vars": {"PYTHONPATH": pythonpath}},
                     **backend_config(scenario, temp_dir)["init_args"])
        cluster = ray.cluster_resources()
    except Exception as exc:
        where = f"could not join the cluster at run.ray_address = {address!r}" if address else "could not start"
        raise EngineStartError(f"Ray {where}: {_reason(exc)}. Try --engine inprocess.") from exc
    cpus, gpus = cluster.get("CPU", 0.0), cluster.get("GPU", 0.0)
    if resources["num_cpus"] > cpus or resources["num_gpus"] > gpus:
        raise EngineStartError(
            f"Ray cannot host one virtual client: each asks for {resources['num_cpus']:g} CPUs and "
            f"{resources['num_gpus']:g} GPUs (resources.num_cpus, resources.num_gpus), and Ray has "
            f"{cpus:g} CPUs and {gpus:g} GPUs here. Lower them, or try --engine inprocess."
        )


@contextmanager
def sigterm_handler_kept() -> Iterator[None]:
    """The process's SIGTERM handler as it was before the block (``ray.init`` sets one that calls ``sys.exit``).

    With Ray's handler a SIGTERM raised ``SystemExit`` in the middle of Flower's
    engine, which ended in Ray's crash dump (exit 134) and a run left
    ``running``; the command line's handler (:mod:`term_fl.cli.signals`) stops
    the run as Ctrl-C does. Off the main thread Ray sets none and nothing changes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, handler)


def make_ray_temp_dir() -> str:
    """A fresh temp folder for Ray under :func:`ray_temp_root`; :class:`EngineStartError` if it cannot be made."""
    root = ray_temp_root()
    try:
        return tempfile.mkdtemp(prefix="tfl-ray-", dir=root)
    except OSError as exc:
        raise EngineStartError(
            f"Ray could not start: cannot make its temp folder in {root} ({exc.strerror or exc}). "
            "Set RAY_TMPDIR to a writable folder, or try --engine inprocess."
        ) from exc


RUN_SIMULATION_NOTICE = "The `run_simulation` function is deprecated"


def _not_the_run_simulation_notice(record: logging.LogRecord) -> bool:
    args = record.args if isinstance(record.args, tuple) else ()
    notice = str(record.msg).startswith("DEPRECATED FEATURE") and args and str(args[0]).startswith(RUN_SIMULATION_NOTICE)
    return not notice


@contextmanager
def without_run_simulation_notice() -> Iterator[None]:
    """Drop Flower's deprecation notice of ``run_simulation`` inside the block; every other log line stays."""
    logger = logging.getLogger("flwr")
    logger.addFilter(_not_the_run_simulation_notice)
    try:
        yield
    finally:
        logger.removeFilter(_not_the_run_simulation_notice)


_session: dict[str, Any] = {}


@contextmanager
def environment_restored() -> Iterator[None]:
    """``os.environ`` as it was before the block, at its end (what the session and Ray's ``init`` set is undone)."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        for key in set(os.environ) - set(saved):
            del os.environ[key]
        for key, value in saved.items():
            if os.environ.get(key) != value:
                os.environ[key] = value


@contextmanager
def ray_session(scenario: Scenario) -> Iterator[None]:
    """Keep one Ray instance (and, with the patch ``actor-reuse``, its ClientApp actors) alive across simulations.

    For a sweep or a test module. Flower 1.42's Ray backend starts Ray only
    when it is not running, but starts new ClientApp actors for every
    simulation and shuts Ray down after it. With the opt-in patch
    ``actor-reuse`` (``TERM_FL_FLOWER_PATCHES``, read when the session
    starts) a simulation reuses the previous one's actors when they ask for
    the same resources and all came back idle
    (:func:`term_fl.flower_internals.reusing_client_actors`: each actor
    process keeps its imports and the ClientApp's per-process caches, which
    never change a reply), and leaves them running at its end. Ray (and the
    last actors) are shut down once, at the end, and the environment gets
    its variables of before back (the session's and those Ray's ``init``
    sets, such as ``PYTHONBREAKPOINT``). Nested
    sessions are no-ops. With ``run.ray_address`` the session joins that
    cluster instead of starting Ray, and its end only disconnects: the
    cluster, and what else runs on it, keep running. Raises
    :class:`EngineStartError` when Ray cannot start or the cluster cannot be
    joined (:func:`start_ray`).
    """
    require("sim", "ray", purpose=RAY_PURPOSE)
    if _session:
        yield
        return
    with environment_restored():
        for key, value in QUIET_ENV.items():
            os.environ.setdefault(key, value)
        # a joined cluster keeps its own temp folder; term-fl only disconnects from it at the end
        temp_dir = "" if scenario.run.ray_address else make_ray_temp_dir()
        guard = orphan_guard(*filter(None, [temp_dir]))  # Ray's agents and workers outlive a driver killed with SIGKILL
        watchdog = guard.__enter__()
        interrupted = False
        try:
            start_ray(scenario, temp_dir)
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
            if temp_dir:
                shutil.rmtree(temp_dir, ignore_errors=True)


def actors_reused() -> int:
    """How many simulations of the current ``ray_session`` reused the previous one's actors."""
    reuse: ActorReuse | None = _session.get("reuse")
    return 0 if reuse is None else reuse.reused


# How long Ctrl-C waits for the server loop to record the run as interrupted,
# and then for Ray to shut down; what Ray leaves after that, the watchdog
# (term_fl.engines.watchdog) ends once the process exits (term_fl.cli.commands.entry
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
    resume: Checkpoint | None = None,
) -> FederationResult:
    """Run a scenario in Flower's Simulation Engine and return the server loop's result.

    Inside a :func:`ray_session` it uses the session's Ray and actors; else it
    opens one for this run. Raises :class:`EngineStartError` when Ray cannot
    start (nothing recorded), :class:`EngineError` when the engine stops
    during the run (recorded as failed). ``resume``: go on after a checkpoint.
    """
    require("sim", "ray", purpose=RAY_PURPOSE)
    with ray_session(scenario):
        return _simulate(scenario, num_nodes, recorder, on_round, resume)


def _simulate(
    scenario: Scenario,
    num_nodes: int,
    recorder: Recorder | None,
    on_round: Callable[[RoundRecord, int], None] | None,
    resume: Checkpoint | None = None,
) -> FederationResult:
    try:
        from flwr.simulation import run_simulation
    except ImportError as exc:  # README, "Flower versions"
        import flwr

        raise EngineStartError(
            f"Flower {flwr.__version__} has no flwr.simulation.run_simulation, which term-fl's Flower engine "
            "calls (term-fl supports Flower 1.42). Try --engine inprocess, or install flwr==1.42.0."
        ) from exc

    outcome: dict[str, Any] = {}
    server_app = ServerApp()
    stop, server_done = Stop(), threading.Event()
    with simulation_node_table() as node_table:

        @server_app.main()
        def main(grid: Grid, context: Context) -> None:
            try:
                outcome["result"] = run_federation(
                    StoppableGrid(grid, stop), scenario, recorder, on_round=on_round, node_partitions=node_table,
                    resume=resume,
                )
            except BaseException as exc:  # re-raised in the caller's thread below
                outcome["error"] = exc
            finally:
                server_done.set()

        try:
            # Flower's ServerApp thread sets this process's task identity: the one of before comes back after
            with linear_dispatcher(), without_run_simulation_notice(), preserved_identity():
                run_simulation(
                    server_app=server_app,
                    client_app=client_app,
                    num_supernodes=num_nodes,
                    backend_config=backend_config(scenario, _session["temp_dir"]),
                )
        except KeyboardInterrupt as interrupt:
            # Ctrl-C (or SIGTERM, SIGHUP) reaches this (main) thread; the server loop runs in Flower's
            # ServerApp thread: stop it with the same interruption and let it record the run as interrupted.
            stop.set(copy.copy(interrupt))
            server_done.wait(STOP_GRACE_S)
            raise
        except Exception as exc:
            error = EngineError(
                f"Flower's Simulation Engine stopped: {_reason(exc)}. "
                "Run with -v to see Flower's and Ray's logs, or try --engine inprocess."
            )
            stop.set(error)
            server_done.wait(STOP_GRACE_S)
            raise error from exc
    if "error" in outcome:
        raise outcome["error"]
    if "result" not in outcome:
        raise FederationError("the Flower simulation ended without running the server loop; run with -v to see its log")
    return outcome["result"]
