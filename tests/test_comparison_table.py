"""The one comparison: which cells pair with which baselines, Holm's family of a table, the marks.

Expected values are computed here with scipy.stats' paired t-test and a
naive Holm written out per family; the pairing rules are checked on settings
as runs store them.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from term_fl.comparison import pairing
from term_fl.comparison.cells import flat_settings
from term_fl.comparison.table import (
    PRIMARY, SIGNIFICANCE, CellValues, compare_cells, difference_columns, significance_notes,
)  # fmt: skip
from term_fl.maths.fairness import STATISTICS

SEEDS = range(6)


def settings(strategy: str, *, rounds: int = 10, tau: float = 0.0, reference: str = "none", **params) -> dict:
    """A run's flat settings as the comparison reads them from its stored config and strategy parameters."""
    config = {"name": "s", "run": {"rounds": rounds, "seed": 0, "reference": reference, "node_timeout": 5.0},
              "strategy": {"name": strategy, "t": 0.0, "q": 0.0}, "client": {"tau": tau, "lr": 0.1}}  # fmt: skip
    return flat_settings(config, {**params, "tau": tau})


def cell(key: str, strategy: str, lift: float, flat: dict, seeds=SEEDS) -> CellValues:
    """Per seed: worst 10% = 0.3 + lift + noise, the other statistics noise around fixed values."""
    rng = np.random.default_rng(list(key.encode()))
    values = {"test": {s.key: {seed: 0.5 + (lift if s.key == "worst_10" else 0.0) + rng.normal(0, 0.01)
                               for seed in seeds} for s in STATISTICS}}  # fmt: skip
    return CellValues(key, strategy, flat, values)


def test_run_reference_client_tau_and_strategy_parameters_do_not_keep_a_cell_from_its_baseline():
    cells = [("f", "fedavg", settings("fedavg")),
             ("t", "term", settings("term", reference="fedavg", t=10.0, lam=1.0)),
             ("h", "term", settings("term", tau=-1.0, t=-2.0)),
             ("h0", "fedavg", settings("fedavg", tau=-1.0)),  # hierarchical FedAvg: not plain, paired with FedAvg
             ("r", "term", settings("term", rounds=20, t=10.0))]  # fmt: skip
    assert pairing.baseline_cells(cells) == {"f": {}, "t": {"fedavg": "f"}, "h": {"fedavg": "f"}, "h0": {"fedavg": "f"},
                                             "r": {}}  # fmt: skip


def test_the_defences_are_shared_settings():
    cells = [("f", "fedavg", settings("fedavg")), ("fc", "fedavg", settings("fedavg", clip_loss=3.0)),
             ("t", "term", settings("term", t=1.0, clip_loss=3.0))]  # fmt: skip
    assert pairing.baseline_cells(cells)["t"] == {"fedavg": "fc"}


def test_each_cell_pairs_with_every_baseline_and_a_baseline_with_those_before_it(monkeypatch):
    # q-FFL stands in for a second baseline strategy (FedAvg (uniform) is not registered yet)
    monkeypatch.setattr(pairing, "BASELINES", ("fedavg", "qffl"))
    cells = [("f", "fedavg", settings("fedavg")), ("u", "qffl", settings("qffl", q=1.0)),
             ("t", "term", settings("term", t=1.0)), ("x", "term", settings("term", rounds=5, t=1.0))]  # fmt: skip
    assert pairing.baseline_cells(cells) == {"f": {}, "u": {"fedavg": "f"}, "t": {"fedavg": "f", "qffl": "u"}, "x": {}}


def test_an_ambiguous_baseline_is_not_paired():
    cells = [("f1", "fedavg", settings("fedavg")), ("f2", "fedavg", settings("fedavg")), ("t", "term", settings("term"))]
    assert pairing.baseline_cells(cells)["t"] == {}


def naive_holm_marks(p_values: list[float], alpha: float = 0.05) -> list[bool]:
    """Holm's step-down procedure, written out: reject while p_(i) <= alpha / (m - i + 1)."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    marks = [False] * len(p_values)
    for rank, i in enumerate(order):
        if p_values[i] > alpha / (len(p_values) - rank):
            break
        marks[i] = True
    return marks


def test_holms_family_is_every_cell_against_each_baseline_on_the_primary_statistics(monkeypatch):
    monkeypatch.setattr(pairing, "BASELINES", ("fedavg", "qffl"))
    cells = [cell("f", "fedavg", 0.0, settings("fedavg")), cell("u", "qffl", 0.02, settings("qffl", q=1.0)),
             cell("t1", "term", 0.01, settings("term", t=1.0)), cell("t5", "term", 0.05, settings("term", t=5.0))]  # fmt: skip
    out = compare_cells(cells, ["test"])
    values = {c.key: c.values["test"] for c in cells}
    family = [(k, b, s) for k in ("u", "t1", "t5") for b in out[k]["baselines"] for s in PRIMARY]
    assert len(family) == (1 + 2 + 2) * 4  # u - fedavg; t1, t5 - fedavg and - qffl
    p = []
    for k, b, s in family:
        ref = out[k]["baselines"][b]
        expected = stats.ttest_rel([values[k][s][seed] for seed in SEEDS], [values[ref][s][seed] for seed in SEEDS])
        got = out[k]["differences"][b]["test"][s]
        assert got["p_value"] == pytest.approx(expected.pvalue)
        p.append(got["p_value"])
    marks = [out[k]["differences"][b]["test"][s]["significant"] for k, b, s in family]
    assert marks == naive_holm_marks(p) and any(marks) and not all(marks)
    for k in ("u", "t1", "t5"):  # outside the family: a raw p-value, never a mark
        other = out[k]["differences"]["fedavg"]["test"]["best_10"]
        assert other["p_value"] is not None and other["p_holm"] is None and other["significant"] is False
    assert out["f"]["differences"] == {} and out["f"]["stats"]["test"]["mean"]["n"] == len(SEEDS)


def test_nothing_is_marked_with_fewer_than_three_seeds_and_the_table_says_so():
    cells = [cell("f", "fedavg", 0.0, settings("fedavg"), seeds=(0, 1)),
             cell("t", "term", 0.5, settings("term", t=1.0), seeds=(0, 1))]  # fmt: skip
    got = compare_cells(cells, ["test"])["t"]["differences"]["fedavg"]["test"]["worst_10"]
    assert got["n"] == 2 and got["p_holm"] is not None and not got["significant"]
    assert significance_notes([2])[0] == SIGNIFICANCE and "fewer than 3 seeds are never marked" in significance_notes([2])[1]
    assert any("no mark is the expected result" in n and "4.30" in n for n in significance_notes([3, 3]))
    assert significance_notes([10]) == [SIGNIFICANCE]


def test_difference_columns_flatten_every_field_with_the_interval_as_two_columns():
    cells = [cell("f", "fedavg", 0.0, settings("fedavg")), cell("t", "term", 0.1, settings("term", t=1.0))]
    differences = compare_cells(cells, ["test"])["t"]["differences"]
    columns = difference_columns(differences)
    d = differences["fedavg"]["test"]["worst_10"]
    assert columns["test.worst_10.minus_fedavg.mean"] == d["mean"]
    assert [columns["test.worst_10.minus_fedavg.ci95_lo"], columns["test.worst_10.minus_fedavg.ci95_hi"]] == d["ci95"]
    assert columns["test.worst_10.minus_fedavg.p_holm"] == d["p_holm"]
    assert len(columns) == len(STATISTICS) * 9
