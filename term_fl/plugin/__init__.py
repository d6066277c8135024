"""What a user's own Flower app adds to run term-fl's strategies.

term-fl's strategies (:mod:`term_fl.strategies`) are Flower strategies: a
ServerApp swaps them in for Flower's. TERM, q-FFL and AFL weight each client
by F_k, the loss of the received global model on the client's training data
before local training; the ClientApp measures it with a helper from here:

- :func:`pre_training_loss` (PyTorch models; :mod:`.losses`).

The names load on first use, so importing this package costs nothing.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TRAIN_LOSS_BEFORE", "pre_training_loss"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from term_fl.plugin import losses

        return getattr(losses, name)
    raise AttributeError(f"module 'term_fl.plugin' has no attribute {name!r}")
