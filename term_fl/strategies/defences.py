"""The template's opt-in defences applied to one round's replies, with a warning per reply they change.

The math is :mod:`term_fl.maths.robust` (relative to the round's median);
here it meets the replies: the losses every round function reads are the
clipped ones (``clip_loss``), the models every round function and the
combine step read are the bounded ones (``max_update_norm``). Both are off
(0) by default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from logging import WARNING

import numpy as np
from flwr.supercore import log
from numpy.typing import NDArray

from term_fl.maths.robust import bounded_model, clip_losses, update_norm, update_scales

from .stacked import StackedModels

__all__ = ["defended_losses", "defended_models"]

Who = Sequence[tuple[int, "int | None"]]
"""(node id, partition id) of each reply, in order: for the warnings."""


def defended_losses(losses: NDArray[np.float64], clip_loss: float, who: Who) -> NDArray[np.float64]:
    """The reported losses, those above ``clip_loss`` x the round's median lowered to it (0: unchanged)."""
    clipped_losses, clipped = clip_losses(losses, clip_loss)
    for (node, partition), loss, cut in zip(who, losses, clipped, strict=True):
        if cut:
            log(WARNING, "node %d (partition %s) reported loss %.6g, clipped to %.6g (clip_loss = %g x median)",
                node, partition, loss, float(np.max(clipped_losses)), clip_loss)
    return clipped_losses


def defended_models(
    models: StackedModels, global_model: Mapping[str, NDArray], max_update_norm: float, who: Who
) -> StackedModels:
    """The models, each update w_k - w longer than ``max_update_norm`` median norms scaled down to that length.

    Computed model by model in each array's own dtype
    (:func:`~term_fl.maths.robust.bounded_model`); ``models`` itself when no
    update is scaled.
    """
    norms = np.array([update_norm(local, global_model) for local in models])
    scales = update_scales(norms, max_update_norm)
    if np.all(scales >= 1.0):
        return models
    for (node, partition), norm, scale in zip(who, norms, scales, strict=True):
        if scale < 1.0:
            log(WARNING, "node %d (partition %s): update norm %.6g scaled down to %.6g (max_update_norm = %g x "
                "median)", node, partition, norm, norm * scale, max_update_norm)
    return StackedModels.stack([bounded_model(local, global_model, float(scale))
                                for local, scale in zip(models, scales, strict=True)])
