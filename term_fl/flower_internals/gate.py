"""The version gate: every use of Flower's internals asks here first.

Two kinds of internals go through it:

- **fast paths** (the codec, the record views, the fast reply, the
  Simulation-Engine patches): on only on the Flower they were written for
  (:data:`SUPPORTED`) and not turned off (:data:`INTERNALS_ENV`); elsewhere
  the caller takes Flower's public path. Their private modules are imported
  with :func:`private`, which answers None instead of raising.
- **required internals** (the in-process engine's message ids and ServerApp
  identity, Flower's ``Run``): no public path exists, so they are used on
  every version; :func:`required` imports them, and a Flower that moved
  them gets one :class:`FlowerInternalsError` naming what is missing.

The settings are read from the environment once, on first use in a process,
and again when a run starts (:func:`term_fl.engines.run_scenario` calls
:func:`reload`); :func:`override` changes them for a block (benchmarks,
tests). The environment:

``TERM_FL_FLOWER_INTERNALS``
    ``on`` (default) or ``off``: ``off`` takes Flower's public paths everywhere.
``TERM_FL_FLOWER_PATCHES``
    which patches of Flower's Simulation Engine to install, comma-separated
    from :data:`PATCHES` (``dispatcher``, ``node-table``, ``actor-reuse``),
    or ``all`` / ``none`` (default ``none``).
``TERM_FL_DISPATCHER``, ``TERM_FL_DISCOVERY`` (term-fl 0.2)
    ``linear`` / ``engine`` add the dispatcher / the node table, ``flower`` /
    ``query`` remove it, whatever ``TERM_FL_FLOWER_PATCHES`` says.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, cast

from term_fl.common.errors import ConfigError, EngineStartError

__all__ = [
    "DISCOVERY_ENV", "DISPATCHER_ENV", "INTERNALS_ENV", "PATCHES", "PATCHES_ENV", "SUPPORTED", "FlowerInternalsError",
    "Settings", "fast_paths", "override", "patch_on", "private", "read_settings", "reload", "required", "settings",
]

SUPPORTED = "1.42."  # the Flower versions (prefix) these internals were checked against
INTERNALS_ENV = "TERM_FL_FLOWER_INTERNALS"
PATCHES_ENV = "TERM_FL_FLOWER_PATCHES"
DISPATCHER_ENV = "TERM_FL_DISPATCHER"  # 0.2: "flower" turned the dispatcher off
DISCOVERY_ENV = "TERM_FL_DISCOVERY"  # 0.2: "query" turned the node table off
PATCHES = ("dispatcher", "node-table", "actor-reuse")
"""The Simulation-Engine patches, each opt-in: the linear message dispatcher, the engine's node table, actor reuse."""

# The 0.2 variables: value -> (patch, whether it is on).
_LEGACY = {
    DISPATCHER_ENV: {"linear": ("dispatcher", True), "flower": ("dispatcher", False)},
    DISCOVERY_ENV: {"engine": ("node-table", True), "query": ("node-table", False)},
}

log = logging.getLogger("term_fl")


class FlowerInternalsError(EngineStartError):
    """The installed Flower lacks an internal that term-fl cannot do without; the message names it and a way out."""


@dataclass(frozen=True)
class Settings:
    """What the gate answers, read once per process and per run.

    Attributes
    ----------
    flower_version : str
        The Flower these settings were read for.
    fast : bool
        Whether the fast paths are on: Flower :data:`SUPPORTED` and
        ``TERM_FL_FLOWER_INTERNALS`` not ``off``.
    patches : frozenset of str
        The Simulation-Engine patches asked for (names of :data:`PATCHES`);
        they are installed only where ``fast`` is true.
    """

    flower_version: str
    fast: bool
    patches: frozenset[str]


def _patch_names(value: str, source: str) -> frozenset[str]:
    """The patch names of a ``TERM_FL_FLOWER_PATCHES`` value; ConfigError naming ``source`` for an unknown one."""
    names = {part.strip() for part in value.split(",") if part.strip()}
    if names == {"all"}:
        return frozenset(PATCHES)
    if names <= {"none"}:
        return frozenset()
    unknown = sorted(names - set(PATCHES))
    if unknown:
        raise ConfigError(
            f"{source}: unknown patch {', '.join(map(repr, unknown))}; allowed: a comma-separated list of "
            f"{', '.join(PATCHES)}, or all, or none"
        )
    return frozenset(names)


def read_settings(environ: Mapping[str, str], flower_version: str) -> Settings:
    """The settings that ``environ`` asks for on Flower ``flower_version`` (a pure function: nothing cached).

    Raises :class:`ConfigError` naming the variable, its value and what is allowed.
    """
    switch = environ.get(INTERNALS_ENV, "on")
    if switch not in ("on", "off"):
        raise ConfigError(f"{INTERNALS_ENV}={switch!r}: allowed values are 'on' (the default) and 'off'")
    patches = set(_patch_names(environ.get(PATCHES_ENV, "none"), PATCHES_ENV))
    for name, meanings in _LEGACY.items():
        value = environ.get(name)
        if value is None:
            continue
        if value not in meanings:
            raise ConfigError(f"{name}={value!r}: allowed values are {' and '.join(map(repr, meanings))} "
                              f"(or use {PATCHES_ENV})")
        patch, on = meanings[value]
        (patches.add if on else patches.discard)(patch)
    fast = switch == "on" and flower_version.startswith(SUPPORTED)
    return Settings(flower_version, fast, frozenset(patches))


_from_environment: Settings | None = None
_current: Settings | None = None  # _from_environment with the open override() blocks applied
_overrides: list[dict[str, Any]] = []
_warned: set[str] = set()
_imported: dict[tuple[str, str | None], Any] = {}


def _applied(base: Settings) -> Settings:
    """``base`` with every open :func:`override` block's changes, innermost last."""
    for changes in _overrides:
        base = replace(base, **changes)
    return replace(base, fast=base.fast and base.flower_version.startswith(SUPPORTED))


def reload() -> Settings:
    """Read the settings again from ``os.environ`` and the installed Flower; open :func:`override` blocks still apply.

    Engines call this when a run starts (:func:`term_fl.engines.run_scenario`).
    """
    global _from_environment, _current
    import flwr

    fresh = read_settings(os.environ, flwr.__version__)
    if not fresh.flower_version.startswith(SUPPORTED) and fresh.flower_version not in _warned:
        _warned.add(fresh.flower_version)
        log.warning(
            "term-fl's fast paths into Flower's internals were written for Flower %sx, this is Flower %s: "
            "using Flower's public API instead (same numbers, slower). See term_fl/flower_internals/.",
            SUPPORTED, fresh.flower_version,
        )
    _imported.clear()
    _from_environment = fresh
    _current = _applied(fresh)
    return _current


def settings() -> Settings:
    """The current settings (read on first use)."""
    current = _current
    return current if current is not None else reload()


def fast_paths() -> bool:
    """Whether the fast paths are on (:attr:`Settings.fast`); read once, not per call."""
    current = _current
    return (current if current is not None else reload()).fast


def patch_on(name: str) -> bool:
    """Whether the Simulation-Engine patch ``name`` (one of :data:`PATCHES`) is asked for and the fast paths are on."""
    if name not in PATCHES:
        raise ValueError(f"unknown patch {name!r}; the patches are {', '.join(PATCHES)}")
    current = settings()
    return current.fast and name in current.patches


@contextmanager
def override(*, fast: bool | None = None, patches: Iterable[str] | str | None = None) -> Iterator[Settings]:
    """Inside the block, the settings with these changes (``patches``: names, or ``"all"`` / ``"none"``).

    The changes hold over :func:`reload` (a run starting inside the block);
    ``fast=True`` cannot turn the fast paths on for a Flower other than
    :data:`SUPPORTED`. The settings of before come back at the end, also
    after an error.
    """
    global _current
    changes: dict[str, Any] = {}
    if fast is not None:
        changes["fast"] = fast
    if patches is not None:
        text = patches if isinstance(patches, str) else ",".join(patches)
        changes["patches"] = _patch_names(text, "override(patches=...)")
    base = _environment_settings()
    _overrides.append(changes)
    _current = _applied(base)
    try:
        yield _current
    finally:
        del _overrides[next(i for i, open_ in enumerate(_overrides) if open_ is changes)]
        _current = _applied(_environment_settings())


def _environment_settings() -> Settings:
    """The settings the environment asked for when last read (read now if never)."""
    if _from_environment is None:
        reload()
    return cast(Settings, _from_environment)


def _import(module: str, name: str | None) -> Any:
    """``module`` (or its attribute ``name``), imported and cached; raises ImportError or AttributeError."""
    key = (module, name)
    if key not in _imported:
        value = importlib.import_module(module)
        _imported[key] = value if name is None else getattr(value, name)
    return _imported[key]


def private(module: str, name: str | None = None) -> Any | None:
    """A private Flower module (or one of its names) for a fast path; None where the caller takes the public path.

    None when the fast paths are off, and when this Flower has no such
    module or name (a warning names it once).
    """
    if not fast_paths():
        return None
    try:
        return _import(module, name)
    except (ImportError, AttributeError) as exc:
        where = module if name is None else f"{module}.{name}"
        if where not in _warned:
            _warned.add(where)
            log.warning("Flower %s has no %s (%s): term-fl takes Flower's public path instead",
                        settings().flower_version, where, exc)
        return None


def required(module: str, name: str, purpose: str) -> Any:
    """A private Flower name that ``purpose`` cannot do without, on any Flower version.

    Raises :class:`FlowerInternalsError` naming the name, the Flower version
    and the way out when this Flower has no such name.
    """
    try:
        return _import(module, name)
    except (ImportError, AttributeError) as exc:
        import flwr

        raise FlowerInternalsError(
            f"Flower {flwr.__version__} has no {module}.{name}, which {purpose} needs ({exc}); term-fl was "
            f"written for Flower {SUPPORTED}x: install flwr==1.42.0, or try --engine flower"
        ) from exc
