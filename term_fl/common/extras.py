"""Optional dependencies: which extra of ``pip install term-fl[...]`` brings what.

``pip install term-fl`` installs the Flower strategies with Flower and numpy
only. Running scenarios needs the ``sim`` extra (torch, Ray through
``flwr[simulation]``), the dashboard and reports need the ``dashboard`` extra
(plotly, jinja2). :func:`require` turns a missing module into an error that
says which extra to install, instead of a bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

import importlib.util

__all__ = ["EXTRA_MODULES", "MissingExtraError", "require"]

# The modules term-fl imports from each extra (pyproject.toml lists the
# requirements; a test checks that they agree).
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "sim": ("torch", "ray", "scipy"),
    "dashboard": ("plotly", "jinja2", "scipy"),
}

TORCH_FIRST = {"torch"}  # installed before the extra, so pip pulls no CUDA build by accident


class MissingExtraError(ImportError):
    """A feature needs a module that ``pip install term-fl`` without an extra does not bring."""


def install_hint(extra: str, missing: list[str]) -> str:
    """The commands that install ``extra``."""
    command = f"pip install 'term-fl[{extra}]'"
    if TORCH_FIRST & set(missing):
        command = f"pip install torch==2.13.0 (or the CUDA build of your choice), then {command}"
    return command


def require(extra: str, *modules: str, purpose: str) -> None:
    """Raise :class:`MissingExtraError` naming ``extra`` when one of ``modules`` is not installed.

    Parameters
    ----------
    extra : str
        A key of :data:`EXTRA_MODULES`.
    modules : str
        Top-level module names, each among ``EXTRA_MODULES[extra]``.
    purpose : str
        What needs them, for the message (e.g. "term-fl run").
    """
    unknown = set(modules) - set(EXTRA_MODULES[extra])
    if unknown:
        raise ValueError(f"modules {sorted(unknown)} are not part of the {extra!r} extra")
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingExtraError(
            f"{purpose} needs {', '.join(missing)}, which the '{extra}' extra installs: "
            f"{install_hint(extra, missing)}"
        )
