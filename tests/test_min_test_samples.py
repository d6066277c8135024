"""data.min_test_samples: small devices get enough test samples; 0 splits exactly as before."""

from __future__ import annotations

import pytest

from term_fl.data import build_dataset
from term_fl.data.splits import split_sizes




@pytest.mark.parametrize(
    ("n", "fractions", "min_test", "expected"),
    [
        (7, (0.5, 0.2, 0.3), 0, (4, 1, 2)),  # the rule alone (the documented example)
        (7, (0.5, 0.2, 0.3), 4, (2, 1, 4)),  # two more test samples: val keeps one, train gives one
        (7, (0.5, 0.2, 0.3), 2, (4, 1, 2)),  # already enough: unchanged
        (3, (0.8, 0.1, 0.1), 5, (1, 1, 1)),  # capped at n - 2
        (20, (0.5, 0.2, 0.3), 10, (6, 4, 10)),  # train gives first, validation keeps its 4
        (5, (0.2, 0.4, 0.4), 4, (1, 1, 3)),  # capped at n - 2: train and validation keep one each
        (100, (0.8, 0.1, 0.1), 5, (80, 10, 10)),
    ],
)
def test_min_test_samples_raises_the_test_split_and_every_split_keeps_one(n, fractions, min_test, expected):
    got = split_sizes(n, fractions, min_test=min_test)
    assert got == expected and sum(got) == n and min(got) >= 1


def test_min_test_samples_zero_splits_every_vehicle_sized_device_as_before():
    for n in range(3, 600):
        assert split_sizes(n, (0.5, 0.2, 0.3), min_test=0) == split_sizes(n, (0.5, 0.2, 0.3))


def test_min_test_samples_gives_small_devices_their_test_samples_and_says_so_in_the_metadata():
    plain = build_dataset("synthetic", seed=1, num_devices=6, max_samples=8, train_fraction=0.6,
                          val_fraction=0.2, test_fraction=0.2)
    raised = build_dataset("synthetic", seed=1, num_devices=6, max_samples=8, train_fraction=0.6,
                           val_fraction=0.2, test_fraction=0.2, min_test_samples=4)
    assert plain.metadata["sizes"]["test"] == [2] * 6
    assert raised.metadata["sizes"]["test"] == [4] * 6
    assert [raised.device(k).num_examples("test") for k in range(6)] == [4] * 6
    with pytest.raises(ValueError, match="min_test_samples must be an integer >= 0, got -1"):
        build_dataset("synthetic", seed=1, num_devices=6, min_test_samples=-1)


def test_the_scenario_setting_is_hashed_only_when_set_and_refuses_negative_values():
    from conftest import small_scenario
    from term_fl.common.errors import ConfigError
    from term_fl.config import config_hash

    plain = small_scenario()
    assert config_hash(small_scenario("data.min_test_samples=0")) == config_hash(plain)
    assert config_hash(small_scenario("data.min_test_samples=3")) != config_hash(plain)
    with pytest.raises(ConfigError, match=r"data\.min_test_samples: .*greater than or equal to 0"):
        small_scenario("data.min_test_samples=-2")


def test_summary_names_the_worst_10_devices_with_their_test_sizes(tmp_path):
    """summary.json's worst_10_devices are the devices test.worst_10 averages, with their sample counts."""
    import json

    import numpy as np

    from conftest import small_scenario
    from term_fl.data import dataset_for
    from term_fl.results import ResultsStore
    from term_fl.runs import run_one

    scenario = small_scenario("run.engine=inprocess", "run.rounds=2", "data.min_test_samples=5")
    store = ResultsStore(tmp_path / "r.db")
    run_one(scenario, store, out_dir=tmp_path / "run")
    store.close()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    worst = summary["worst_10_devices"]["test"]
    assert len(worst) == max(1, summary["test"]["K"] // 10)
    assert np.mean([d["accuracy"] for d in worst]) == pytest.approx(summary["test"]["worst_10"])
    sizes = dataset_for(scenario).metadata["sizes"]["test"]
    assert [d["examples"] for d in worst] == [sizes[d["partition_id"]] for d in worst]
    assert all(d["examples"] >= 5 for d in worst)
    assert [d["partition_id"] for d in summary["worst_10_devices"]["validation"]]
