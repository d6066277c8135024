"""Every use of Flower's internals, in one package, behind one version gate.

term-fl's speed work reaches into Flower 1.42 where its public API costs too
much (each measured: benchmarks/README.md), and its in-process engine plays
parts of Flower for which no public API exists. All of it lives here, one
concern per module, and every private use asks :mod:`.gate` first:

- :mod:`.gate`: the settings (read once), :func:`fast_paths`, :func:`patch_on`,
  :func:`private` and :func:`required`: the one door to every private name;
- :mod:`.codec` (fast path): :func:`to_array` / :func:`from_array`, their
  record versions and :func:`metric_record`: Flower's bytes without its checks;
- :mod:`.records` (fast path): :func:`records_of`, :func:`reply_message`;
- :mod:`.identity` (required): :func:`set_message_id`,
  :func:`serverapp_identity`, :func:`preserved_identity`, :func:`empty_run`;
- :mod:`.dispatcher` (opt-in patch ``dispatcher``): :func:`linear_dispatcher`;
- :mod:`.node_table` (opt-in patch ``node-table``): :func:`simulation_node_table`;
- :mod:`.actors` (opt-in patch ``actor-reuse``): :func:`reusing_client_actors`,
  :func:`kill_actors`;
- :mod:`.dp_wrappers` (public names, Flower's call structure):
  :func:`calling_dp_wrapper`, :func:`refuse_under_dp_wrapper`: whether a
  strategy runs inside one of Flower's differential-privacy wrappers.

A **fast path** is on only on Flower :data:`SUPPORTED` (and not with
``TERM_FL_FLOWER_INTERNALS=off``); elsewhere the same function calls
Flower's public API (the same numbers, slower), a warning says so once, and
``tests/test_flower_internals.py`` fails on purpose until someone checks the
internals against the new version. A **required** internal has no public
alternative and is used on every version; a Flower without it stops the
in-process engine with one :class:`FlowerInternalsError`. An **opt-in
patch** of the Simulation Engine is installed only when asked for
(``TERM_FL_FLOWER_PATCHES=dispatcher,node-table,actor-reuse`` or ``all``)
and the fast paths are on.

Nothing here imports a private Flower module when imported: this package
loads its modules on first use (``from term_fl.flower_internals import
to_array`` imports :mod:`.codec`, which needs only ``flwr.app``), and the
private modules are imported by the functions that patch them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .actors import ActorReuse, kill_actors, reusing_client_actors
    from .codec import from_array, from_array_record, metric_record, to_array, to_array_record
    from .dispatcher import LOCK_SHARE, POLL_S, add_messages_to_queue, dispatcher_wanted, linear_dispatcher
    from .dp_wrappers import DP_WRAPPERS, calling_dp_wrapper, refuse_under_dp_wrapper
    from .gate import (
        DISCOVERY_ENV,
        DISPATCHER_ENV,
        INTERNALS_ENV,
        PATCHES,
        PATCHES_ENV,
        SUPPORTED,
        FlowerInternalsError,
        Settings,
        fast_paths,
        override,
        patch_on,
        reload,
        settings,
    )
    from .identity import empty_run, preserved_identity, serverapp_identity, set_message_id
    from .node_table import simulation_node_table
    from .records import records_of, reply_message

# Where each name lives: imported on first use.
_HOMES = {
    "actors": ("ActorReuse", "kill_actors", "reusing_client_actors"),
    "codec": ("from_array", "from_array_record", "metric_record", "to_array", "to_array_record"),
    "dispatcher": ("LOCK_SHARE", "POLL_S", "add_messages_to_queue", "dispatcher_wanted", "linear_dispatcher"),
    "dp_wrappers": ("DP_WRAPPERS", "calling_dp_wrapper", "refuse_under_dp_wrapper"),
    "gate": ("DISCOVERY_ENV", "DISPATCHER_ENV", "INTERNALS_ENV", "PATCHES", "PATCHES_ENV", "SUPPORTED",
             "FlowerInternalsError", "Settings", "fast_paths", "override", "patch_on", "reload", "settings"),
    "identity": ("empty_run", "preserved_identity", "serverapp_identity", "set_message_id"),
    "node_table": ("simulation_node_table",),
    "records": ("records_of", "reply_message"),
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}

__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})
