"""The Simulation Engine's node -> partition table (opt-in patch ``node-table``).

Flower 1.42's ``vce_api._register_nodes`` creates the virtual nodes, node
``i`` holding partition ``i``, and returns ``{node_id: partition_id}``; the
engine builds every node's ``node_config`` (``partition-id``) from it.
Recording that table spares the server asking every virtual node which
partition it holds (10,000 Ray round trips at 10,000 nodes;
benchmarks/README.md, 'discovery' and 'flower_patches').

Private names: ``vce_api._register_nodes`` (wrapped inside
:func:`simulation_node_table`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from .dispatcher import VCE_API
from .gate import patch_on, private

__all__ = ["simulation_node_table"]


@contextmanager
def simulation_node_table() -> Iterator[Callable[[float], Mapping[int, int] | None] | None]:
    """Inside the block, the Simulation Engine's own table of which virtual node holds which partition.

    Records the table ``vce_api._register_nodes`` returns and yields a
    function that waits up to the given seconds for it
    (:data:`term_fl.federation.loop.NodePartitions`). Yields None (the server
    asks every node, as on a deployment) unless the patch ``node-table`` is
    asked for and the fast paths are on.
    """
    vce_api = private(VCE_API) if patch_on("node-table") else None
    if vce_api is None:
        yield None
        return
    table: dict[int, int] = {}
    ready = threading.Event()
    original = vce_api._register_nodes  # noqa: SLF001

    def register_nodes(num_nodes: int, state_factory: Any) -> dict[int, int]:
        mapping = original(num_nodes, state_factory)
        table.update(mapping)
        ready.set()
        return mapping

    def known(timeout: float) -> Mapping[int, int] | None:
        return dict(table) if ready.wait(timeout) else None

    vce_api._register_nodes = register_nodes  # start_vce looks it up at call time
    try:
        yield known
    finally:
        vce_api._register_nodes = original
