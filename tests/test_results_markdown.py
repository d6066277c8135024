"""scripts/results_markdown.py prints a comparison.json's numbers as they are, bold exactly where marked."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "results_markdown.py"
spec = importlib.util.spec_from_file_location("results_markdown", SCRIPT)
results_markdown = importlib.util.module_from_spec(spec)
spec.loader.exec_module(results_markdown)


def _diff(mean, se, holm, significant):
    return {"mean": mean, "se": se, "p_holm": holm, "significant": significant}


def test_a_difference_is_bold_only_where_the_comparison_marks_it_and_carries_its_p_holm():
    stats = {f"test.{k}": v for k, v in {"mean": 0.8, "pooled_mean": 0.81, "worst_10": 0.5, "std": 0.1}.items()}
    comparison = {
        "seeds": {"selection": [0, 1, 2], "report": [10, 11, 12], "shared": False},
        "selection": {"term": {"cell": "term t=3", "rule": "best validation worst_10"}},
        "baselines": [{"strategy": "fedavg_uniform", "label": "FedAvg (uniform)"}],
        "cells": [
            {"cell": "fedavg_uniform", "n": 3, **stats},
            {"cell": "term t=3", "n": 3, **stats, "differences": {"fedavg_uniform": {"test": {
                "mean": _diff(0.01, 0.002, 0.04, True), "worst_10": _diff(0.05, 0.03, 0.3, False)}}}},
        ],
    }
    text = results_markdown.tables(comparison)
    assert "Selection seeds: 0-2; report seeds: 10-12." in text
    assert "Chosen for term: term t=3 (best validation worst_10)." in text
    row = next(line for line in text.splitlines() if line.startswith("| term t=3 ✓"))
    assert "**+0.010 ± 0.002 (0.04)**" in row and "| +0.050 ± 0.030 (0.3) |" in row
    assert "0.800 | 0.810 | 0.500 | 0.100" in row
    assert results_markdown.tables(comparison, only=["fedavg_uniform"]).count("| fedavg_uniform") == 1
