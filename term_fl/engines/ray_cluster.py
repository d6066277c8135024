"""Joining an existing Ray cluster (``run.ray_address``, ``--ray-address``), or starting a private Ray for a sweep.

term-fl talks to Ray in two ways: Flower's Simulation Engine runs a run's
virtual clients as Ray actors (:mod:`term_fl.engines.flower`), and
``term-fl sweep --parallel`` / ``--ray-address`` runs a sweep's cells as Ray
tasks (:mod:`term_fl.runs.ray_cells`). Both either start a private Ray
instance (own temp folder, stopped at the end) or join a cluster someone
started with ``ray start``: then term-fl only connects and disconnects
(``ray.shutdown()`` in a driver that joined stops no process of the
cluster), and never stops the cluster.

``ray.init(address=...)`` retries an address where no Ray answers for
minutes; :func:`check_address` fails within seconds instead, naming the
option and the address.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from term_fl.common.errors import EngineStartError

__all__ = ["CONNECT_TIMEOUT_S", "check_address", "join_args", "sweep_cluster"]

CONNECT_TIMEOUT_S = 5.0


def _host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``HOST:PORT`` or ``[IPv6]:PORT``; None for ``auto``."""
    if address == "auto":
        return None
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def check_address(address: str, option: str = "--ray-address") -> None:
    """Fail within seconds, naming ``option``, when nothing answers at ``address`` (``HOST:PORT`` of a Ray head).

    ``auto`` is left to Ray (it looks for a cluster started on this machine
    and says at once when there is none).
    """
    hostport = _host_port(address)
    if hostport is None:
        return
    host, port = hostport
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise EngineStartError(
            f"{option} {address}: no Ray cluster answers there ({reason}, within {CONNECT_TIMEOUT_S:g} s). Give the "
            "address of a running cluster's head (the GCS port of `ray start --head --port=PORT`, 6379 by default), "
            "check that its port is open from here, or leave the option out for a private Ray on this machine."
        ) from None


def pythonpath_env() -> str:
    """This process's ``sys.path`` as ``PYTHONPATH``, set here and for Ray's workers (as Flower's Ray backend does)."""
    pythonpath = os.pathsep.join(filter(None, [os.pathsep.join(sys.path), os.environ.get("PYTHONPATH")]))
    os.environ["PYTHONPATH"] = pythonpath
    return pythonpath


def join_args(address: str) -> dict[str, Any]:
    """``ray.init`` arguments that join the cluster at ``address`` (no resources, no temp folder: the cluster's)."""
    verbose = logging.getLogger("flwr").isEnabledFor(logging.INFO)
    return {"address": address, "logging_level": logging.INFO if verbose else logging.ERROR, "log_to_driver": verbose}


def _init(option: str, joining: str, **kwargs: Any) -> None:
    import ray

    try:
        ray.init(runtime_env={"env_vars": {"PYTHONPATH": pythonpath_env()}}, **kwargs)
    except Exception as exc:
        where = f"{option} {joining}: " if joining else ""
        raise EngineStartError(f"{where}Ray could not start or connect: {' '.join(str(exc).split())[:300]}") from exc


@contextmanager
def sweep_cluster(address: str, num_cpus: int | None, option: str = "--ray-address") -> Iterator[None]:
    """Ray for a sweep's cells: the cluster at ``address``, else a private instance with ``num_cpus`` CPUs.

    A joined cluster is only disconnected from at the end; a private one is
    stopped, its temp folder removed, and its processes ended by the
    watchdog should this process die (:func:`term_fl.engines.watchdog.orphan_guard`).
    """
    from term_fl.engines.flower import QUIET_ENV, SHUTDOWN_S, environment_restored, make_ray_temp_dir, shutdown_ray
    from term_fl.engines.watchdog import orphan_guard

    with environment_restored():
        for key, value in QUIET_ENV.items():
            os.environ.setdefault(key, value)
        if address:
            check_address(address, option)
            _init(option, address, **join_args(address))
            try:
                yield
            finally:
                shutdown_ray(SHUTDOWN_S)  # a driver that joined: disconnects, the cluster keeps running
            return
        temp_dir = make_ray_temp_dir()
        with orphan_guard(temp_dir) as watchdog:
            try:
                _init(option, "", num_cpus=num_cpus, num_gpus=_gpus(), include_dashboard=False, _temp_dir=temp_dir,
                      logging_level=logging.ERROR, log_to_driver=False)
                yield
            finally:
                stopped = shutdown_ray(SHUTDOWN_S)
                if watchdog is not None:
                    watchdog.keep = not stopped
                shutil.rmtree(temp_dir, ignore_errors=True)


def _gpus() -> int:
    from term_fl.engines.flower import cuda_device_count

    return cuda_device_count()
