"""Opt-in defences against hostile or broken clients, as pure functions of one round's replies.

TERM with t > 0 gives a device weight proportional to exp(t F_k): a client
that reports a huge loss F_k takes (nearly) all the weight, and its model
becomes the global model. Any weighted average also takes in a model whose
weights are huge. Three defences, each relative to the round's median so
that they need no scale of their own:

- **loss clipping** (``clip_loss = c``): a reported loss above c times the
  round's median loss is lowered to c x median before the strategy weighs
  the replies. With c = 10 and t = 1, a client can gain at most a factor
  exp(9 median) over a median client, whatever it reports.
- **update-norm bounding** (``max_update_norm = b``): an update
  Delta_k = w_k - w whose L2 norm exceeds b times the round's median update
  norm is scaled down to that norm (norm bounding, as in Sun et al., "Can
  You Really Backdoor Federated Learning?", 2019).
- **size capping** (``max_size_ratio = r``): a reported number of examples
  above r times the round's median is lowered to r x median before any
  strategy weighs by it, so a client that reports n_k = 1e300 counts at
  most r median clients.

All three are off (0) by default: they change what honest but unusual devices
contribute (a device that is much worse than the others is exactly what
TERM with t > 0 is meant to lift), so turn them on where clients may lie.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray


def clip_losses(losses: NDArray[np.float64], ratio: float) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """Losses above ``ratio`` x the median lowered to it; and which were clipped.

    ``ratio`` 0 clips nothing, and so does a round whose median loss is not
    positive (``ratio`` x a negative median lies below the median and would
    clip every loss to one value; the loss transform "median_mad" has no sign).
    """
    losses = np.asarray(losses, dtype=np.float64)
    if ratio <= 0 or losses.size == 0 or not float(np.median(losses)) > 0.0:
        return losses, np.zeros(losses.shape, dtype=bool)
    cap = ratio * float(np.median(losses))
    clipped = losses > cap
    return np.where(clipped, cap, losses), clipped


def cap_sizes(sizes: NDArray[np.float64], ratio: float) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """Sizes above ``ratio`` x the median lowered to it; and which were capped. ``ratio`` 0 caps nothing."""
    sizes = np.asarray(sizes, dtype=np.float64)
    if ratio <= 0 or sizes.size == 0:
        return sizes, np.zeros(sizes.shape, dtype=bool)
    cap = ratio * float(np.median(sizes))
    capped = sizes > cap
    return np.where(capped, cap, sizes), capped


def update_scales(norms: NDArray[np.float64], ratio: float) -> NDArray[np.float64]:
    """Per update, the factor (<= 1) that brings its norm down to ``ratio`` x the median norm.

    ``ratio`` 0 scales nothing (all ones); an update of norm 0 keeps factor 1.
    """
    norms = np.asarray(norms, dtype=np.float64)
    if ratio <= 0 or norms.size == 0:
        return np.ones(norms.shape)
    bound = ratio * float(np.median(norms))
    with np.errstate(divide="ignore", invalid="ignore"):
        scales = np.where(norms > bound, bound / norms, 1.0)
    return np.nan_to_num(scales, nan=1.0, posinf=1.0)


def update_norm(local: dict[str, NDArray], global_model: dict[str, NDArray]) -> float:
    """L2 norm of w_k - w over every array of the model (in float64)."""
    total = 0.0
    for name, value in local.items():
        delta = np.asarray(value, dtype=np.float64) - np.asarray(global_model[name], dtype=np.float64)
        total += float(np.dot(delta.ravel(), delta.ravel()))
    return float(np.sqrt(total))


def bounded_model(local: dict[str, NDArray], global_model: dict[str, NDArray], scale: float) -> dict[str, NDArray]:
    """w + scale (w_k - w), in each array's own dtype; ``local`` itself when scale is 1."""
    if scale >= 1.0:
        return local
    return {name: (global_model[name] + scale * (value - global_model[name])).astype(value.dtype, copy=False)
            for name, value in local.items()}
