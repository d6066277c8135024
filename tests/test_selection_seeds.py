"""Selection and report on disjoint seeds: parameters are chosen on the selection seeds' validation split, and
every reported number comes from the report seeds' test split."""

from __future__ import annotations

import json

import pytest

from term_fl.cli import main
from term_fl.comparison.summaries import group_cells, select_by_validation
from term_fl.common.errors import ConfigError
from term_fl.config.tables import SelectionConfig
from test_comparison import summary


def test_selection_seeds_split_a_sweeps_seeds_and_both_default_to_all_of_them():
    assert SelectionConfig().split_seeds([3, 1, 2, 1]) == ([1, 2, 3], [1, 2, 3])
    assert SelectionConfig(seeds=[0, 1]).split_seeds([0, 1, 2, 3]) == ([0, 1], [2, 3])
    assert SelectionConfig(seeds=[0, 1], report_seeds=[3]).split_seeds([0, 1, 2, 3]) == ([0, 1], [3])


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (dict(seeds=[0, 1], report_seeds=[1, 2]), "share seeds \\[1\\]"),
        (dict(seeds=[0, 0]), "lists a seed more than once"),
        (dict(report_seeds=[-1]), "seeds must be integers >= 0"),
    ],
)
def test_bad_seed_lists_are_refused_naming_the_problem(values, message):
    with pytest.raises(ValueError, match=message):
        SelectionConfig(**values)


def test_the_choice_reads_only_the_selection_rows_and_reports_the_report_rows_test_split():
    selection = group_cells([  # t=9 looks best on the selection seeds' validation
        summary("fedavg", 0, 0.80, 0.10, 0.8, "f"), summary("term", 0, 0.80, 0.20, 0.8, "t1", t=1.0),
        summary("term", 0, 0.80, 0.40, 0.70, "t9", t=9.0)])
    report = group_cells([  # on the report seeds t=1 would win: it must not matter
        summary("fedavg", 5, 0.80, 0.10, 0.8, "f"), summary("term", 5, 0.80, 0.50, 0.8, "t1", t=1.0),
        summary("term", 5, 0.80, 0.10, 0.65, "t9", t=9.0)])
    chosen = select_by_validation(selection, report_rows=report)["term"]
    assert chosen["cell"] == "term t=9"
    assert chosen["validation"]["worst_10"] == pytest.approx(0.40)  # the selection seeds'
    assert chosen["test"]["mean"] == pytest.approx(0.65)  # the report seeds'


def test_the_reference_of_the_device_mean_bound_is_the_baseline_named():
    rows = group_cells([summary("fedavg", 0, 0.70, 0.10, 0.7, "f"), summary("fedavg_uniform", 0, 0.80, 0.2, 0.8, "u"),
                        summary("term", 0, 0.75, 0.40, 0.7, "t9", t=9.0), summary("term", 0, 0.80, 0.20, 0.8, "t1",
                                                                                     t=1.0)])
    assert select_by_validation(rows, max_mean_drop=0.01)["term"]["cell"] == "term t=9"
    chosen = select_by_validation(rows, max_mean_drop=0.01, reference="fedavg_uniform")["term"]
    assert chosen["cell"] == "term t=1" and "fedavg_uniform 0.8000" in chosen["rule"]


def test_a_sweep_chooses_on_its_selection_seeds_and_reports_on_the_others(tmp_path, capsys):
    path = tmp_path / "sweep.toml"
    path.write_text(
        'name = "split"\n[run]\nrounds = 2\nclients_per_round = 3\n'
        "[data]\nnum_devices = 6\nmax_samples = 60\ntrain_fraction = 0.6\nval_fraction = 0.2\ntest_fraction = 0.2\n"
        "[selection]\nseeds = [0, 1]\n"
        '[sweep]\n"strategy.name" = ["fedavg", "term"]\n"strategy.t" = [1.0, 5.0]\n"run.seed" = [0, 1, 2, 3]\n'
    )
    out, db = tmp_path / "sweep", tmp_path / "r.db"
    assert main(["sweep", str(path), "--out", str(out), "--db", str(db)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "chosen on the validation split of seeds 0, 1; every table and test above is on the test split of seeds 2, 3" \
        in printed
    comparison = json.loads((out / "comparison.json").read_text())
    assert comparison["seeds"] == {"selection": [0, 1], "report": [2, 3], "shared": False}
    assert all(row["seeds"] == [2, 3] for row in comparison["cells"])
    assert all(row["seeds"] == [0, 1] for row in comparison["selection_cells"])
    chosen = comparison["selection"]["term"]
    report_row = next(r for r in comparison["cells"] if r["config_hash"] == chosen["config_hash"])
    selection_row = next(r for r in comparison["selection_cells"] if r["config_hash"] == chosen["config_hash"])
    assert chosen["test"]["mean"] == report_row["test.mean"]
    assert chosen["validation"]["mean"] == selection_row["validation.mean"]


def test_a_sweep_without_selection_seeds_says_that_it_chose_and_reports_on_the_same_seeds(tmp_path, capsys):
    path = tmp_path / "sweep.toml"
    path.write_text(
        'name = "same"\n[run]\nrounds = 2\nclients_per_round = 3\n[data]\nnum_devices = 6\nmax_samples = 60\n'
        '[sweep]\n"strategy.name" = ["fedavg", "term"]\n"run.seed" = [0, 1]\n'
    )
    assert main(["sweep", str(path), "--out", str(tmp_path / "s"), "--db", str(tmp_path / "r.db")]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "seeds 0, 1: the parameters were chosen and are reported on the same seeds" in printed


def test_a_scenario_with_overlapping_seed_lists_is_bad_input():
    from conftest import small_scenario

    with pytest.raises(ConfigError, match=r"selection.seeds and selection.report_seeds share seeds \[2\]"):
        small_scenario("selection.seeds=[1, 2]", "selection.report_seeds=[2, 3]")


def test_with_noisy_devices_the_sweep_also_chooses_without_knowing_which_devices_are_clean():
    from term_fl.cli.sweep import selections

    runs = [summary("fedavg", 0, 0.80, 0.10, 0.8, "f"), summary("term", 0, 0.80, 0.40, 0.8, "t1", t=-1.0),
            summary("term", 0, 0.80, 0.20, 0.8, "t2", t=-2.0)]
    for run, clean in zip(runs, (0.10, 0.20, 0.50), strict=True):  # on the clean devices t=-2 is best
        run["validation_clean"] = {**run["validation"], "worst_10": clean}
    rows = group_cells(runs)
    choices = selections(SelectionConfig(devices="clean"), rows, rows)
    assert set(choices) == {"all", "clean"}
    assert choices["clean"]["term"]["cell"] == "term t=-2" and choices["all"]["term"]["cell"] == "term t=-1"
    plain = group_cells([summary("fedavg", 0, 0.8, 0.1, 0.8, "f"), summary("term", 0, 0.8, 0.2, 0.8, "x", t=1.0)])
    assert set(selections(SelectionConfig(), plain, plain)) == {"all"}  # no noise: one choice


def test_report_seeds_alone_choose_nothing_and_report_on_them():
    assert SelectionConfig(report_seeds=[2, 3]).split_seeds([0, 1, 2, 3]) == ([], [2, 3])
    from term_fl.cli.sweep import seed_lines

    (line,) = seed_lines({"selection": [], "report": [10, 11, 12], "shared": False})
    assert "no selection seed ran here" in line and "seeds 10-12" in line


def test_a_sweep_without_report_seeds_says_its_tables_are_empty():
    from term_fl.cli.sweep import seed_lines

    assert SelectionConfig(seeds=[0, 1]).split_seeds([0, 1]) == ([0, 1], [])
    (line,) = seed_lines({"selection": [0, 1], "report": [], "shared": False})
    assert "no report seed ran here" in line
