"""The template's defences applied to one round's replies, with a warning per reply they change.

The math is :mod:`term_fl.maths.robust` and :mod:`term_fl.maths.loss_transforms`
(relative to the round's median); here it meets the replies: the losses
every round function reads are the clipped ones (``clip_loss``), then
transformed (``loss_transform``: on by default for TERM with t < 0 only);
the sizes it weighs by are the capped ones (``max_size_ratio``); the models
every round function and the combine step read are the bounded ones
(``max_update_norm``). ``clip_loss``, ``max_size_ratio`` and
``max_update_norm`` are off (0) by default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from logging import INFO, WARNING

import numpy as np
from flwr.supercore import log
from numpy.typing import NDArray

from term_fl.maths.loss_transforms import TransformedLosses, transform_losses
from term_fl.maths.robust import bounded_model, cap_sizes, clip_losses, update_norm, update_scales

from .reports import reply_name
from .stacked import StackedModels

__all__ = ["defended_losses", "defended_models", "defended_sizes", "transformed_losses"]

Who = Sequence[tuple[int, "int | None"]]
"""(node id, partition id) of each reply, in order: for the warnings."""


def defended_losses(losses: NDArray[np.float64], clip_loss: float, who: Who) -> NDArray[np.float64]:
    """The reported losses, those above ``clip_loss`` x the round's median lowered to it (0: unchanged)."""
    clipped_losses, clipped = clip_losses(losses, clip_loss)
    if clip_loss > 0 and losses.size and not float(np.median(losses)) > 0.0:
        log(WARNING, "clip_loss = %g leaves this round's losses as they are: their median %.6g is not positive, and "
            "a multiple of it bounds nothing (loss_transform = 'median_mad' bounds losses of any sign)", clip_loss,
            float(np.median(losses)))
    for (node, partition), loss, cut in zip(who, losses, clipped, strict=True):
        if cut:
            log(WARNING, "%s reported loss %.6g, clipped to %.6g (clip_loss = %g x median)",
                reply_name(node, partition), loss, float(np.max(clipped_losses)), clip_loss)
    return clipped_losses


def transformed_losses(losses: NDArray[np.float64], transform: str, clip: float, server_round: int) -> TransformedLosses:
    """The round's losses after ``loss_transform`` (:func:`~term_fl.maths.loss_transforms.transform_losses`).

    One INFO line per round says how many median_mad bounded: with TERM at
    t < 0 it is on by default, and bounding an outlying loss is its job, not
    an event to warn about.
    """
    result = transform_losses(losses, transform, clip)
    if transform == "median_mad" and np.any(result.bounded):
        log(INFO, "aggregate_train: round %d: %d of %d losses bounded to median %.6g +- %g x %.6g (loss_transform "
            "= median_mad)", server_round, int(np.sum(result.bounded)), losses.size, result.median, clip,
            result.scale)
    return result


def defended_sizes(sizes: NDArray[np.float64], max_size_ratio: float, who: Who) -> NDArray[np.float64]:
    """The reported sizes, those above ``max_size_ratio`` x the round's median lowered to it (0: unchanged)."""
    capped_sizes, capped = cap_sizes(sizes, max_size_ratio)
    for (node, partition), size, cut in zip(who, sizes, capped, strict=True):
        if cut:
            log(WARNING, "%s reported %.6g examples, capped to %.6g (max_size_ratio = %g x median)",
                reply_name(node, partition), size, float(np.max(capped_sizes)), max_size_ratio)
    return capped_sizes


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
            log(WARNING, "%s: update norm %.6g scaled down to %.6g (max_update_norm = %g x median)",
                reply_name(node, partition), norm, norm * scale, max_update_norm)
    return StackedModels.stack([bounded_model(local, global_model, float(scale))
                                for local, scale in zip(models, scales, strict=True)])
