"""What a run may change for the whole process, and must give back: a snapshot to compare before and after."""

from __future__ import annotations

import gc
import logging
import os
from typing import Any

import torch
from flwr.supercore.task_identity import TaskIdentity


def identity() -> tuple[Any, ...]:
    """Flower's task identity of this process (None before a task sets it)."""
    return TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id


def process_state() -> dict[str, Any]:
    """torch's thread count, the garbage collector, the task identity, the environment, the Simulation Engine's
    functions that term-fl may patch, and Flower's logger."""
    from flwr.server.superlink.fleet.vce import vce_api
    from flwr.server.superlink.fleet.vce.backend import raybackend

    flwr_logger = logging.getLogger("flwr")
    return {
        "torch threads": torch.get_num_threads(),
        "gc enabled": gc.isenabled(),
        "task identity": identity(),
        "environment": dict(os.environ),
        "dispatcher": vce_api.add_messages_to_queue,
        "register nodes": vce_api._register_nodes,
        "ray backend": (raybackend.RayBackend.build, raybackend.RayBackend.terminate),
        "flwr logger": (flwr_logger.level, list(flwr_logger.filters), list(flwr_logger.handlers)),
    }
