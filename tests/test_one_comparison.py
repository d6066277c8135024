"""The quick start's runs, compared everywhere alike: the sweep's comparison, the dashboard and the report.

`term-fl run` (the default scenario, a few rounds, three seeds) writes TERM
and its FedAvg reference to one store. The dashboard's comparison of the
scenario must pair them (``run.reference`` is no differing setting), show
every primary statistic's difference, and give the same numbers, tests and
marks as :func:`term_fl.comparison.summaries.group_cells` over the runs'
summary.json and config.json (what `term-fl sweep` writes comparison.json
from); the scenario report inlines that same answer.
"""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from test_dashboard import report_data

from term_fl.cli.commands import main
from term_fl.comparison.summaries import group_cells
from term_fl.dashboard import create_app, write_report
from term_fl.maths.fairness import flagged

SEEDS = (0, 1, 2)


@pytest.fixture(scope="module")
def quick_start(tmp_path_factory):
    """The default scenario as `term-fl run` runs it, 3 rounds, seeds 0-2: (store, [run directories])."""
    root = tmp_path_factory.mktemp("quick")
    db, dirs = root / "results.db", []
    for seed in SEEDS:
        out = root / f"seed{seed}"
        assert main(["run", "--engine", "inprocess", "--rounds", "3", "--seed", str(seed), "--db", str(db),
                     "--out", str(out)]) == 0  # fmt: skip
        dirs += [out, *(out.with_name(f"{out.name}-reference-{name}") for name in ("fedavg", "fedavg_uniform"))]
    return db, dirs


def test_the_dashboard_pairs_a_run_with_its_reference_and_never_calls_the_reference_a_setting(quick_start):
    db, _ = quick_start
    with TestClient(create_app(db)) as client:
        data = client.get("/api/compare?scenario=default").json()
        page = client.get("/compare?scenario=default").text
    assert [c["label"] for c in data["cells"]] == ["fedavg", "fedavg_uniform", "term t=3"]  # not "... reference=..."
    assert data["varying"] == [] and not any("never pooled" in note for note in data["notices"])
    fedavg, uniform, term = data["cells"]
    assert term["baselines"] == {"fedavg": fedavg["key"], "fedavg_uniform": uniform["key"]}
    assert data["reference"] == fedavg["key"]
    for split in ("test", "val"):
        assert set(term["differences"]["fedavg"][split]) >= set(flagged("primary"))  # pooled too
        assert all(d["n"] == 3 for d in term["differences"]["fedavg"][split].values() if d["mean"] is not None)
        ahead = term["ahead"]["fedavg"][split]
        assert ahead["rounds_compared"] == 1  # round 3: evaluated by both (every 10th round, and the last)
        assert term["ahead_from"][split] == ahead["round"]
    assert "Paired differences: cell minus baseline" in page


def test_the_dashboard_and_the_sweeps_comparison_give_the_same_differences_tests_and_marks(quick_start):
    db, dirs = quick_start
    summaries = [{**json.loads((d / "summary.json").read_text()), "config": json.loads((d / "config.json").read_text())}
                 for d in dirs]  # fmt: skip
    rows = {r["strategy"]: r for r in group_cells(summaries)}
    with TestClient(create_app(db)) as client:
        cells = {c["strategy"]: c for c in client.get("/api/compare?scenario=default").json()["cells"]}
    assert rows["term"]["baselines"] == cells["term"]["baselines"] == {
        "fedavg": cells["fedavg"]["key"], "fedavg_uniform": cells["fedavg_uniform"]["key"]}
    sweep, dashboard = rows["term"]["differences"]["fedavg"]["test"], cells["term"]["differences"]["fedavg"]["test"]
    for stat in flagged("primary"):
        assert dashboard[stat] == sweep[stat], stat  # the same floats: one computation
    assert all(d["p_holm"] is not None for k, d in dashboard.items() if k in flagged("primary") and d["p_value"])


def test_the_scenario_report_carries_the_same_comparison(quick_start, tmp_path):
    db, _ = quick_start
    path = write_report(db, "default", tmp_path / "report.html")
    data = report_data(path.read_text())["compare"]
    with TestClient(create_app(db)) as client:
        answer = client.get("/api/compare?scenario=default").json()
    by_label = {c["label"]: c for c in answer["cells"]}
    for cell in data["cells"]:
        assert cell["differences"] == by_label[cell["label"]]["differences"]
    assert data["significance"] == answer["significance"]
