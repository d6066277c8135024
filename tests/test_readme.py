"""The README's plug-in example runs as written: its ClientApp and ServerApp, on real Flower Messages."""

from __future__ import annotations

import re

import numpy as np

from conftest import REPO
from readme_example import NUM_NODES, run_example


def printed(text: str, label: str) -> np.ndarray:
    match = re.search(rf"{label}: \[(.*?)\]", text, re.S)
    assert match, f"{label!r} not printed"
    return np.array([float(x) for x in match.group(1).split()])


def test_readme_example_tilts_by_the_clients_pre_training_losses(capsys):
    namespace = run_example(REPO / "README.md")
    out = capsys.readouterr().out
    losses, weights = printed(out, "F_k of the last round"), printed(out, "tilted weights of the last round")
    assert len(weights) == NUM_NODES // 2  # fraction_train=0.5 of 4 nodes
    assert np.all(np.isfinite(losses)) and np.all(losses > 0)
    # t = 1, lam = 1, base weights n_k / sum n (every device holds 40 samples): p_k = softmax(F_k)
    expected = np.exp(losses - losses.max()) / np.exp(losses - losses.max()).sum()
    np.testing.assert_allclose(weights, expected, rtol=1e-5)
    final = namespace["context"].state["final"]
    assert {k: tuple(v.shape) for k, v in final.items()} == {"weight": (2, 5), "bias": (2,)}
    assert all(np.all(np.isfinite(v.numpy())) for v in final.values())
