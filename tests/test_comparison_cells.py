"""Cells of a comparison: one run per seed, labels by what differs, statistics over seeds.

Expected values are computed here by hand or with the statistics module, not
with the functions under test.
"""

from __future__ import annotations

import math
import statistics

import pytest

from term_fl.comparison import cells as cc


def run(run_id, seed, status="finished", started_at=0.0):
    return {"run_id": run_id, "seed": seed, "status": status, "started_at": started_at}


def test_a_repeated_seed_counts_once_with_its_latest_finished_run():
    runs = [run("a", 0, started_at=1), run("b", 0, started_at=2), run("c", 1), run("d", 0, "failed", started_at=3)]
    counted, repeats = cc.counted_runs(runs)
    assert [r["run_id"] for r in counted] == ["b", "c"]  # latest *finished* run of seed 0
    assert repeats == {0: ["d", "a"]}


def test_a_seed_without_a_finished_run_counts_its_latest_run():
    counted, repeats = cc.counted_runs([run("a", 3, "failed", 1), run("b", 3, "running", 2)])
    assert [r["run_id"] for r in counted] == ["b"] and repeats == {3: ["a"]}


def test_distinct_seeds_only_no_repeats():
    counted, repeats = cc.counted_runs([run("x", 2), run("y", 0), run("z", 1)])
    assert [r["seed"] for r in counted] == [0, 1, 2] and repeats == {}


def test_flat_settings_use_the_strategy_parameters_and_leave_out_seeds_and_names():
    config = {
        "name": "vehicle", "description": "d", "sweep": {"run.seed": [0, 1]}, "selection": {"objective": "worst_10"},
        "run": {"rounds": 5, "seed": 3, "name": "x", "engine": "flower"},
        "strategy": {"name": "term", "t": 1.0, "q": 9.0, "lam": 1.0},
        "data": {"name": "vehicle", "seed": None, "fractions": [0.5, 0.5]},
    }  # fmt: skip
    flat = cc.flat_settings(config, {"t": 1.0, "lam": 1.0})
    assert flat == {"run.rounds": 5, "strategy.name": "term", "strategy.t": 1.0, "strategy.lam": 1.0,
                    "data.name": "vehicle", "data.fractions": [0.5, 0.5]}  # fmt: skip


def test_varying_settings_name_every_key_that_differs_including_a_missing_one():
    a = {"run.rounds": 5, "client.lr": 0.1, "data.fractions": [0.5, 0.5]}
    b = {"run.rounds": 20, "client.lr": 0.1, "data.fractions": [0.5, 0.5], "client.tau": 0.0}
    assert cc.varying_settings([a, b]) == ["client.tau", "run.rounds"]
    assert cc.varying_settings([a, dict(a)]) == []


def test_labels_name_the_settings_in_which_cells_differ_never_a_hash():
    base = ["fedavg", "term t=20", "fedavg", "term t=20"]
    settings = [
        {"strategy.name": "fedavg", "run.rounds": 5},
        {"strategy.name": "term", "strategy.t": 20.0, "strategy.lam": 1.0, "run.rounds": 5},
        {"strategy.name": "fedavg", "run.rounds": 20},
        {"strategy.name": "term", "strategy.t": 20.0, "strategy.lam": 0.5, "run.rounds": 20},
    ]
    labels, outside = cc.cell_labels(base, settings, strategies=["fedavg", "term", "fedavg", "term"])
    assert outside == ["run.rounds"]
    assert labels == ["fedavg rounds=5", "term t=20 lam=1 rounds=5", "fedavg rounds=20", "term t=20 lam=0.5 rounds=20"]
    assert len(set(labels)) == 4 and not any("#" in label for label in labels)


def test_labels_stay_plain_when_only_the_strategy_differs():
    settings = [{"strategy.name": "fedavg", "run.rounds": 5}, {"strategy.name": "term", "strategy.t": 1.0, "run.rounds": 5},
                {"strategy.name": "term", "strategy.t": 5.0, "run.rounds": 5}]  # fmt: skip
    labels, outside = cc.cell_labels(["fedavg", "term t=1", "term t=5"], settings, strategies=["fedavg", "term", "term"])
    assert labels == ["fedavg", "term t=1", "term t=5"] and outside == []


def test_short_names_add_parts_only_where_two_keys_would_read_the_same():
    assert cc.short_names(["run.seed", "data.seed", "client.lr"]) == {
        "run.seed": "run.seed", "data.seed": "data.seed", "client.lr": "lr"}  # fmt: skip


def test_mean_se_is_the_sample_standard_error_and_ignores_missing_values():
    values = [0.61, 0.7, None, 0.66, float("nan")]
    finite = [0.61, 0.7, 0.66]
    got = cc.mean_se(values)
    assert got["mean"] == pytest.approx(statistics.fmean(finite))
    assert got["se"] == pytest.approx(statistics.stdev(finite) / math.sqrt(3))
    assert got["n"] == 3
    assert cc.mean_se([0.5]) == {"mean": 0.5, "se": None, "n": 1}
    assert cc.mean_se([]) == {"mean": None, "se": None, "n": 0}


def test_paired_difference_uses_only_the_seeds_both_have():
    cell = {0: 0.70, 1: 0.72, 2: 0.69, 3: 0.9}
    reference = {0: 0.60, 1: 0.65, 2: 0.61, 4: 0.1}
    got = cc.paired_difference(cell, reference)
    diffs = [0.10, 0.07, 0.08]
    assert got["seeds"] == [0, 1, 2]
    assert got["mean"] == pytest.approx(statistics.fmean(diffs))
    assert got["se"] == pytest.approx(statistics.stdev(diffs) / math.sqrt(3))


def test_curve_is_the_mean_and_standard_error_from_count_sum_and_sum_of_squares():
    per_round = [[0.5, 0.4], [0.6, 0.8, 0.7], [0.9], []]
    got = cc.curve([1, 2, 3, 4], [len(v) for v in per_round], [sum(v) for v in per_round],
                   [sum(x * x for x in v) for v in per_round])  # fmt: skip
    assert got["round"] == [1, 2, 3] and got["n"] == [2, 3, 1]
    assert got["mean"] == pytest.approx([0.45, 0.7, 0.9])
    assert got["se"][:2] == pytest.approx([statistics.stdev(v) / math.sqrt(len(v)) for v in per_round[:2]])
    assert got["se"][2] is None
    same = cc.curve([7], [3], [1.5], [0.75])  # three equal values: no spread, never a negative variance
    assert same["se"] == [0.0]
    assert cc.curve([], [], [], []) == {"round": [], "mean": [], "se": [], "n": []}


def test_ahead_from_is_the_first_round_of_the_final_stretch_above_the_reference():
    ref = {"round": [1, 2, 3, 4, 5], "mean": [0.1, 0.2, 0.3, 0.4, 0.5]}
    assert cc.ahead_from({"round": [1, 2, 3, 4, 5], "mean": [0.2, 0.1, 0.4, 0.5, 0.6]}, ref) == 3
    assert cc.ahead_from({"round": [1, 2, 3, 4, 5], "mean": [0.2, 0.3, 0.4, 0.5, 0.4]}, ref) is None
    # lower is better (std): ahead where below
    assert cc.ahead_from({"round": [1, 2], "mean": [0.2, 0.1]}, {"round": [1, 2], "mean": [0.15, 0.15]},
                         higher_is_better=False) == 2  # fmt: skip


def test_ecdf_steps_to_one():
    got = cc.ecdf([0.9, 0.5, None, 0.7, 0.5])
    assert got == {"x": [0.5, 0.5, 0.7, 0.9], "y": [0.25, 0.5, 0.75, 1.0]}
    assert cc.ecdf([]) == {"x": [], "y": []}


@pytest.mark.parametrize(("value", "text"), [(20.0, "20"), (0.5, "0.5"), (1e-5, "1e-05"), (True, "true"),
                                             ("vehicle", "vehicle"), ([0.5, 0.2], "[0.5, 0.2]"), (None, "none")])  # fmt: skip
def test_format_value_writes_settings_as_a_user_would(value, text):
    assert cc.format_value(value) == text


def test_cells_that_share_a_label_are_told_apart_by_the_setting_that_differs():
    """A data setting swept beside the strategies (data.min_test_samples) names the cells that would collide."""
    from term_fl.comparison.summaries import group_cells
    from term_fl.config import Scenario

    summaries = []
    for minimum in (0, 5):
        config = Scenario().model_dump(mode="json")
        config["data"]["min_test_samples"] = minimum
        for seed in (0, 1, 2):
            for name in ("fedavg", "term"):
                strategy = {"name": name, "t": 3.0} if name == "term" else {"name": name}
                summaries.append({"run_id": f"{name}-{minimum}-{seed}", "seed": seed, "strategy": strategy,
                                  "config_hash": f"{name}{minimum}", "config": config,
                                  "test": {"mean": 0.5 + seed / 10 + minimum / 100}, "validation": {"mean": 0.5}})
    labels = sorted(row["cell"] for row in group_cells(summaries))
    assert labels == ["fedavg min_test_samples=0", "fedavg min_test_samples=5",
                      "term t=3 min_test_samples=0", "term t=3 min_test_samples=5"]
    alone = [s for s in summaries if s["config"]["data"]["min_test_samples"] == 0]
    assert sorted(row["cell"] for row in group_cells(alone)) == ["fedavg", "term t=3"]  # nothing to tell apart


def test_a_term_cell_under_the_default_loss_transform_pairs_with_its_scenarios_baselines():
    """TERM t < 0 resolves loss_transform "auto" to median_mad; FedAvg reads no loss. Same scenario: paired."""
    from term_fl.comparison.summaries import group_cells
    from term_fl.config import Scenario, config_hash

    summaries = []
    for name, extra in (("fedavg", {}), ("fedavg_uniform", {}), ("term", {"t": -2.0})):
        config = Scenario().model_dump(mode="json")
        config["strategy"]["name"] = name
        scenario = Scenario.model_validate(config)
        if extra:
            scenario = Scenario.model_validate({**config, "strategy": {**config["strategy"], "term": extra}})
        for seed in (0, 1, 2):
            summaries.append({"run_id": f"{name}-{seed}", "seed": seed, "config_hash": config_hash(scenario),
                              "strategy": {"name": name, **scenario.strategy_params()},
                              "config": scenario.model_dump(mode="json"), "test": {"mean": 0.5 + seed / 10},
                              "validation": {"mean": 0.5}})
    term = next(row for row in group_cells(summaries) if row["strategy"] == "term")
    assert term["strategy"] == "term" and set(term["baselines"]) == {"fedavg", "fedavg_uniform"}
