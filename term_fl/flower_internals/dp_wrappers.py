"""Whether a strategy runs inside one of Flower's differential-privacy wrappers, and refusing where the noise does not fit.

Flower 1.42's four DP wrappers (``DifferentialPrivacy{Server,Client}Side{Fixed,Adaptive}Clipping``,
public names of ``flwr.serverapp.strategy``) hold the strategy they wrap as
``.strategy`` and call its ``configure_train`` from their own. Their noise
(standard deviation ``noise_multiplier x clipping_norm / m``) assumes that
each of the m clients' clipped updates enters the new model with weight 1/m
(Flower's FedAvg with equal sizes; the accountant demands exactly that).
TERM, q-FFL, AFL and the robust aggregators weight clients otherwise, so one
client can move the model by far more than ``clipping_norm / m`` and the
guarantee the wrapper reports is false.

A wrapped strategy cannot see its wrapper (the wrapper is built after it and
Flower offers no hook), so :func:`calling_dp_wrapper` looks at the calling
frames: the wrapper's ``configure_train`` is a caller of the strategy's.
That is how Flower 1.42 calls it (checked for all four wrappers in
``tests/test_privacy.py``); a Flower that called it otherwise would leave
the check blind, not wrong, and ``tests/test_privacy.py`` would fail.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["DP_WRAPPERS", "calling_dp_wrapper", "refuse_under_dp_wrapper"]

DP_WRAPPERS = (
    "DifferentialPrivacyServerSideFixedClipping",
    "DifferentialPrivacyClientSideFixedClipping",
    "DifferentialPrivacyServerSideAdaptiveClipping",
    "DifferentialPrivacyClientSideAdaptiveClipping",
)
"""Flower's DP wrappers, by their public names in ``flwr.serverapp.strategy``."""

_MAX_DEPTH = 8  # frames between the wrapper's configure_train and the check (subclasses calling super())


def calling_dp_wrapper(strategy: object) -> Any | None:
    """The Flower DP wrapper among the callers of the current frame that wraps ``strategy``, or None."""
    from flwr.serverapp import strategy as flower_strategies

    classes = tuple(getattr(flower_strategies, name) for name in DP_WRAPPERS if hasattr(flower_strategies, name))
    frame = sys._getframe(1)  # noqa: SLF001 (the public way to reach the callers' frames)
    for _ in range(_MAX_DEPTH):
        frame = frame.f_back
        if frame is None:
            return None
        caller = frame.f_locals.get("self")
        if isinstance(caller, classes) and getattr(caller, "strategy", None) is strategy:
            return caller
    return None


def refuse_under_dp_wrapper(strategy: Any) -> None:
    """Raise ValueError when ``strategy`` runs inside a Flower DP wrapper and its ``dp_refusal()`` says why it must not.

    ``strategy.dp_refusal()`` is None for the strategies whose weights are the
    ones the wrapper's noise assumes (term-fl's FedAvg, as Flower's, and
    FedAvgUniform), else what its weights are.
    """
    reason = strategy.dp_refusal()
    if reason is None:
        return
    wrapper = calling_dp_wrapper(strategy)
    if wrapper is None:
        return
    name = type(strategy).__name__
    raise ValueError(
        f"term-fl's {name} refuses to run inside Flower's {type(wrapper).__name__}: the wrapper's noise "
        "(noise_multiplier x clipping_norm / m) assumes that each of the m clients' clipped updates enters the "
        f"model with weight 1/m, but {name} weights them by {reason}, so one client can move the model by up "
        "to clipping_norm x its weight and the privacy the wrapper reports would be false. Under differential "
        "privacy use term-fl's FedAvg or FedAvgUniform, or Flower's FedAvg (the only strategy Flower's accountant "
        "accepts); README, 'Privacy'."
    )
