"""The comparison views, the per-device drill-down, paging and the CSV downloads of the dashboard.

A store is filled through the ResultsStore API with a small sweep (FedAvg,
q-FFL over q, TERM over t, three seeds, one seed run twice); expected numbers
(means, standard errors, paired differences, curves, CSV rows) are computed
here from what was written, with the statistics module.
"""

from __future__ import annotations

import csv
import io
import math
import re
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats as scipy_stats
from fastapi.testclient import TestClient
from test_dashboard import naive_stats

from term_fl.dashboard import create_app, write_report
from term_fl.results import ResultsStore

SCENARIO = "sweep"
DEVICES = 8
ROUNDS = 4
SEEDS = (0, 1, 2)
# strategy, tuned parameter, difficulty spread (how far the hard devices stay behind)
CELLS = [("fedavg", {}, 1.0), ("qffl", {"q": 1.0}, 0.7), ("qffl", {"q": 5.0}, 0.6),
         ("term", {"t": 1.0}, 0.6), ("term", {"t": 5.0}, 0.4)]  # fmt: skip


def record(store: ResultsStore, run_id: str, strategy: str, params: dict, seed: int, spread: float, *,
           rounds: int = ROUNDS, scenario: str = SCENARIO, finish: str | None = "finished") -> dict[str, Any]:  # fmt: skip
    """One run: device accuracies from (seed, strategy's spread); returns what was written per round."""
    rng = np.random.default_rng([seed, int(spread * 100), rounds])
    difficulty = np.linspace(0.05, 0.5, DEVICES)
    examples = 30 + 10 * np.arange(DEVICES)
    label = " ".join([strategy, *(f"{k}={v:g}" for k, v in params.items())])
    config = {"name": scenario, "run": {"rounds": rounds, "seed": seed}, "strategy": {"name": strategy, **params},
              "selection": {"objective": "worst_10", "max_mean_drop": 0.05}}  # fmt: skip
    store.create_run(
        run_id=run_id, name=f"{label} seed {seed}", scenario=scenario, engine="inprocess", strategy=strategy,
        strategy_params={**params, "tau": 0.0}, seed=seed, config_hash=f"{label}-{rounds}", config=config,
        data={"name": "synthetic"}, rounds_planned=rounds,
    )  # fmt: skip
    written: dict[str, Any] = {"rounds": {}, "examples": examples}
    for r in range(1, rounds + 1):
        stats, rows, accs, losses = {}, [], {}, {}
        for split in ("test", "val"):
            acc = np.clip(0.9 - spread * difficulty * (1 + 1 / r) + rng.normal(0, 0.02, DEVICES), 0, 1)
            correct = np.round(acc * examples).astype(int)
            acc = correct / examples
            loss = -np.log(np.maximum(acc, 0.01))
            stats[split] = naive_stats(acc, correct, examples, loss)
            accs[split], losses[split] = acc, loss
            rows += [{"partition_id": k, "split": split, "loss": float(loss[k]), "accuracy": float(acc[k]),
                      "correct": int(correct[k]), "examples": int(examples[k])} for k in range(DEVICES)]  # fmt: skip
        sampled = [k for k in range(DEVICES) if (k + r) % 2 == 0]
        weights = {k: (k + 1) / sum(j + 1 for j in sampled) for k in sampled}
        train = [{"partition_id": k, "train_loss": 0.1 * k + r, "train_loss_after": 0.05 * k, "tilted_weight": weights[k],
                  "num_examples": int(examples[k])} for k in sampled]  # fmt: skip
        store.record_round(run_id, r, train_rows=train, eval_rows=rows, stats=stats)
        written["rounds"][r] = {"stats": stats, "accuracy": accs, "loss": losses, "weights": weights,
                                "train": {t["partition_id"]: t for t in train}}  # fmt: skip
    if finish:
        store.finish_run(run_id, finish, error="RuntimeError: boom" if finish == "failed" else None)
    return written


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> tuple[Path, dict[str, dict[str, Any]]]:
    path = tmp_path_factory.mktemp("compare") / "results.db"
    written = {}
    with ResultsStore(path) as store:
        for strategy, params, spread in CELLS:
            for seed in SEEDS:
                run_id = "-".join([strategy, *(f"{v:g}" for v in params.values()), f"s{seed}"])
                written[run_id] = {"cell": (strategy, tuple(params.items())), "seed": seed,
                                   **record(store, run_id, strategy, params, seed, spread)}  # fmt: skip
        # seed 0 of term t=5 again: a repeat (same numbers), later
        written["term-5-s0-again"] = {"cell": ("term", (("t", 5.0),)), "seed": 0,
                                      **record(store, "term-5-s0-again", "term", {"t": 5.0}, 0, 0.4)}  # fmt: skip
    return path, written


@pytest.fixture(scope="module")
def client(sweep):
    with TestClient(create_app(sweep[0])) as c:
        yield c


def final(written: dict, run_id: str, split: str = "test") -> dict[str, float]:
    return written[run_id]["rounds"][ROUNDS]["stats"][split]


def se(values: list[float]) -> float:
    return statistics.stdev(values) / math.sqrt(len(values))


# -- cells ----------------------------------------------------------------------


def test_cells_are_labelled_by_strategy_and_parameter_and_ordered(client):
    data = client.get(f"/api/compare?scenario={SCENARIO}").json()
    assert [c["label"] for c in data["cells"]] == ["fedavg", "qffl q=1", "qffl q=5", "term t=1", "term t=5"]
    assert data["varying"] == []
    assert not any("#" in c["label"] for c in data["cells"])


def test_a_repeated_seed_counts_once_and_the_page_says_so(client, sweep):
    data = client.get(f"/api/compare?scenario={SCENARIO}").json()
    term5 = next(c for c in data["cells"] if c["label"] == "term t=5")
    assert term5["n"] == 3 and term5["seeds"] == [0, 1, 2]
    assert term5["repeats"] == {"0": ["term-5-s0"]}  # the latest run of seed 0 counts
    assert "term-5-s0-again" in term5["run_ids"] and "term-5-s0" not in term5["run_ids"]
    assert any("seed 0 ran 2 times" in n and "a repeat, not a new sample" in n for n in data["notices"])
    worst = [final(sweep[1], r)["worst_10"] for r in ("term-5-s0-again", "term-5-s1", "term-5-s2")]
    got = term5["stats"]["test"]["worst_10"]
    assert got["mean"] == pytest.approx(statistics.fmean(worst), abs=1e-12)
    assert got["se"] == pytest.approx(se(worst), abs=1e-12) and got["n"] == 3
    runs = {r["run_id"]: r for r in data["runs"]}
    assert runs["term-5-s0"]["counted"] is False and runs["term-5-s0-again"]["counted"] is True
    html = client.get(f"/compare?scenario={SCENARIO}").text
    assert "repeat of seed 0: not counted" in html


def test_paired_differences_against_fedavg_over_common_seeds(client, sweep):
    data = client.get(f"/api/compare?scenario={SCENARIO}").json()
    fedavg = next(c for c in data["cells"] if c["strategy"] == "fedavg")
    assert data["reference"] == fedavg["key"] and data["reference_label"] == "fedavg"
    assert data["difference_columns"] == ["mean", "pooled_mean", "worst_10", "std"]
    term1 = next(c for c in data["cells"] if c["label"] == "term t=1")
    assert term1["baselines"] == {"fedavg": fedavg["key"]} and fedavg["baselines"] == {}
    for split in ("test", "val"):
        for stat in ("mean", "pooled_mean", "worst_10", "std"):
            cell = [final(sweep[1], f"term-1-s{s}", split)[stat] for s in SEEDS]
            ref = [final(sweep[1], f"fedavg-s{s}", split)[stat] for s in SEEDS]
            diffs = [a - b for a, b in zip(cell, ref, strict=True)]
            got = term1["differences"]["fedavg"][split][stat]
            assert got == term1["vs_reference"][split][stat]  # the field of 0.2: against FedAvg
            assert got["mean"] == pytest.approx(statistics.fmean(diffs), abs=1e-12), (split, stat)
            assert got["se"] == pytest.approx(se(diffs), abs=1e-12)
            assert got["seeds"] == list(SEEDS)
            assert got["p_value"] == pytest.approx(scipy_stats.ttest_rel(cell, ref).pvalue)
            assert got["p_holm"] >= got["p_value"] and got["significant"] is (got["p_holm"] < 0.05)
    assert fedavg["differences"] == {} and fedavg["vs_reference"] is None
    # Holm's family of a split: the 4 cells other than FedAvg x the 4 primary statistics
    family = [c["differences"]["fedavg"]["test"][k]["p_value"] for c in data["cells"] if c["differences"]
              for k in data["difference_columns"]]  # fmt: skip
    assert len(family) == 16
    smallest = next(c["differences"]["fedavg"]["test"][k] for c in data["cells"] if c["differences"]
                    for k in data["difference_columns"] if c["differences"]["fedavg"]["test"][k]["p_value"] == min(family))
    assert smallest["p_holm"] == pytest.approx(min(1.0, 16 * min(family)))
    assert any("no mark is the expected result" in note for note in data["significance"]["notes"])


def curves_of(client: TestClient, query: str) -> dict[str, dict[str, Any]]:
    """The per-round curves of a comparison (GET /api/compare/curves?QUERY), by cell label."""
    response = client.get(f"/api/compare/curves?{query}")
    assert response.status_code == 200, response.text
    return {c["label"]: c for c in response.json()["cells"]}


def test_curves_are_the_mean_and_standard_error_over_seeds_per_round(client, sweep):
    cells = curves_of(client, f"scenario={SCENARIO}")
    answer = client.get(f"/api/compare?scenario={SCENARIO}").json()
    assert {c["label"]: c["key"] for c in cells.values()} == {c["label"]: c["key"] for c in answer["cells"]}
    for label, run_ids in (("qffl q=5", [f"qffl-5-s{s}" for s in SEEDS]),
                           ("term t=5", next(c["run_ids"] for c in answer["cells"] if c["label"] == "term t=5"))):  # fmt: skip
        cell = cells[label]
        assert not cell["thinned"]
        for split in ("val", "test"):
            for key in ("mean", "pooled_mean", "worst_10", "std", "cvar", "var", "tivar"):  # evar: NaN, no round
                curve = cell["curves"][split][key]
                assert curve["round"] == list(range(1, ROUNDS + 1))
                for i, r in enumerate(curve["round"]):  # the counted runs only (term t=5: seed 0 ran twice)
                    values = [sweep[1][run_id]["rounds"][r]["stats"][split][key] for run_id in run_ids]
                    assert curve["mean"][i] == pytest.approx(statistics.fmean(values), abs=1e-12)
                    assert curve["se"][i] == pytest.approx(se(values), abs=1e-12)
                    assert curve["n"][i] == 3


def leaves(value: Any) -> int:
    """How many numbers, strings and nulls a JSON value holds (its size, whatever the digits of its numbers)."""
    if isinstance(value, dict):
        return sum(leaves(v) for v in value.values())
    if isinstance(value, list):
        return sum(leaves(v) for v in value)
    return 1


def test_the_comparison_answer_and_page_do_not_grow_with_the_runs_rounds(tmp_path):
    """Only the curves' answer grows with the rounds: what the page paints first does not."""
    answers, curves, pages = {}, {}, {}
    for rounds in (3, 40):
        path = tmp_path / f"r{rounds}.db"
        with ResultsStore(path) as store:
            for strategy, params, spread in CELLS[:2]:
                for seed in (0, 1):
                    record(store, f"{strategy}-s{seed}", strategy, params, seed, spread, rounds=rounds)
        with TestClient(create_app(path)) as client:
            answers[rounds] = client.get(f"/api/compare?scenario={SCENARIO}").json()
            curves[rounds] = client.get(f"/api/compare/curves?scenario={SCENARIO}").json()
            pages[rounds] = client.get(f"/compare?scenario={SCENARIO}").text
    assert [c["rounds"] for c in answers[40]["cells"]] == [40, 40]
    assert leaves(answers[40]) == leaves(answers[3])
    # the page inlines the answer: the same numbers (or nulls: a test not defined on these values), other digits
    number = re.compile(r"null|-?\d+(\.\d+)?([eE][-+]?\d+)?")
    assert len(number.sub("0", pages[40])) == len(number.sub("0", pages[3]))
    assert "/api/compare/curves" not in pages[3] and '"curves": {"test"' not in pages[40]
    assert leaves(curves[40]) > 10 * leaves(curves[3])  # every round: 2 cells x 2 splits x 8 statistics x 4 lists


def test_curves_thinned_to_max_points_keep_the_first_and_last_round_evenly_spaced(tmp_path):
    from term_fl.dashboard import compare_view

    path = tmp_path / "long.db"
    with ResultsStore(path) as store:
        for seed in (0, 1):
            record(store, f"long-s{seed}", "fedavg", {}, seed, 1.0, rounds=130)
            record(store, f"short-s{seed}", "term", {"t": 1.0}, seed, 0.5, rounds=30)
        full = {c["label"].split()[0]: c for c in compare_view.compare_curves(store, scenario=SCENARIO)["cells"]}
        thinned = compare_view.compare_curves(store, scenario=SCENARIO, max_points=50)
        with pytest.raises(compare_view.BadQuery, match="max_points must be at least 2"):
            compare_view.compare_curves(store, scenario=SCENARIO, max_points=1)
    cells = {c["label"].split()[0]: c for c in thinned["cells"]}  # "fedavg rounds=130", "term t=1 rounds=30"
    assert thinned["max_points"] == 50
    long, short = cells["fedavg"], cells["term"]
    assert long["thinned"] and long["evaluated_rounds"] == 130
    assert not short["thinned"] and short["curves"] == full["term"]["curves"]  # 30 rounds: every one
    for split in ("test", "val"):
        for key, curve in long["curves"][split].items():
            if key == "evar":  # NaN in every round (naive_stats): no round has a value
                continue
            rounds = curve["round"]
            assert len(rounds) == 50 and rounds[0] == 1 and rounds[-1] == 130
            assert {b - a for a, b in zip(rounds, rounds[1:], strict=False)} <= {2, 3}  # evenly spaced: 129/49 = 2.6
            every = full["fedavg"]["curves"][split][key]  # the thinned curve is the full one at those rounds
            at = {r: i for i, r in enumerate(every["round"])}
            for field in ("mean", "se", "n"):
                assert curve[field] == [every[field][at[r]] for r in rounds], (split, key, field)


def test_curves_endpoint_refuses_a_bad_max_points(client):
    response = client.get(f"/api/compare/curves?scenario={SCENARIO}&max_points=1")
    assert response.status_code == 422 and "max_points" in response.text
    assert client.get("/api/compare/curves?scenario=nope").status_code == 404


def test_ahead_from_is_the_round_from_which_worst_10_stays_above_fedavg(client, sweep):
    data = client.get(f"/api/compare?scenario={SCENARIO}").json()
    fedavg = next(c for c in data["cells"] if c["strategy"] == "fedavg")

    def worst_10_means(cell: dict[str, Any]) -> list[float]:  # from what was written, not from the curves' answer
        return [statistics.fmean(sweep[1][run_id]["rounds"][r]["stats"]["test"]["worst_10"] for run_id in cell["run_ids"])
                for r in range(1, ROUNDS + 1)]  # fmt: skip

    ref = worst_10_means(fedavg)
    checked = 0
    for cell in data["cells"]:
        if cell is fedavg:
            continue
        mine = worst_10_means(cell)
        expected = None
        for r in range(ROUNDS, 0, -1):
            if mine[r - 1] > ref[r - 1]:
                expected = r
            else:
                break
        assert cell["ahead_from"]["test"] == expected
        checked += expected is not None
    assert checked  # some cell is ahead from some round: the test can tell a wrong round from None


def test_ecdf_holds_the_final_device_accuracies_of_every_counted_seed(client, sweep):
    data = client.get(f"/api/compare?scenario={SCENARIO}").json()
    fedavg = next(c for c in data["cells"] if c["strategy"] == "fedavg")
    values = np.sort(np.concatenate([sweep[1][f"fedavg-s{s}"]["rounds"][ROUNDS]["accuracy"]["test"] for s in SEEDS]))
    assert fedavg["ecdf"]["test"]["x"] == pytest.approx(values.tolist())
    assert fedavg["ecdf"]["test"]["y"][-1] == 1.0 and len(fedavg["ecdf"]["test"]["y"]) == 3 * DEVICES


def test_the_validation_choice_is_marked_and_sweeps_are_described(client, sweep):
    data = client.get(f"/api/compare?scenario={SCENARIO}").json()
    cells = {c["label"]: c for c in data["cells"]}
    # the rule (best validation worst 10% with validation device mean within 0.05 of FedAvg's), by hand
    for strategy, labels in (("qffl", ["qffl q=1", "qffl q=5"]), ("term", ["term t=1", "term t=5"])):
        chosen = [label for label in labels if cells[label]["chosen"]]
        assert len(chosen) == 1, strategy
        ref = cells["fedavg"]["stats"]["val"]["mean"]["mean"]
        eligible = [label for label in labels if cells[label]["stats"]["val"]["mean"]["mean"] >= ref - 0.05]
        best = max(eligible, key=lambda label: cells[label]["stats"]["val"]["worst_10"]["mean"])
        assert chosen == [best]
    assert cells["fedavg"]["chosen"] is None
    sweeps = {s["param"]: s for s in data["sweeps"]}
    assert set(sweeps) == {"q", "t"}
    assert [cells_by_key(data)[k]["label"] for k in sweeps["t"]["cells"]] == ["term t=1", "term t=5"]
    assert sweeps["t"]["reference"] == cells["fedavg"]["key"]


def record_stats(store: ResultsStore, run_id: str, params: dict[str, Any], seed: int, worst_10: list[float],
                 selection: dict[str, Any]) -> None:  # fmt: skip
    """A run whose every round has the given validation (and test) worst 10%, device mean 0.8."""
    strategy = "term" if "t" in params else "fedavg"
    label = " ".join([strategy, *(f"{k}={v}" for k, v in params.items())])
    config = {"name": "chosen", "run": {"rounds": len(worst_10)}, "strategy": {"name": strategy, **params},
              "selection": selection}  # fmt: skip
    store.create_run(run_id=run_id, name=run_id, scenario="chosen", engine="inprocess", strategy=strategy,
                     strategy_params={**params, "tau": 0.0}, seed=seed, config_hash=label, config=config, data={},
                     rounds_planned=len(worst_10))  # fmt: skip
    for r, w in enumerate(worst_10, start=1):
        stats = {"mean": 0.8, "pooled_mean": 0.8, "worst_10": w, "std": 0.1}
        store.record_round(run_id, r, stats={"val": stats, "test": stats})
    store.finish_run(run_id)


@pytest.mark.parametrize(("tail", "expected"), [(1, "term t=1"), (3, "term t=5")])
def test_the_ring_follows_the_scenarios_rule_per_family_and_tail(tmp_path, tail, expected):
    """TERM t=1 leads in the last round only, t=5 over the last 3 rounds; the summed-loss cell is a family of
    its own (one candidate: no ring). The sweep's rule with selection.tail decides which is ringed."""
    selection = {"objective": "worst_10", "average": "mean", "max_mean_drop": 0.01, "tail": tail}
    path = tmp_path / "r.db"
    with ResultsStore(path) as store:
        for seed in (0, 1):
            record_stats(store, f"f{seed}", {}, seed, [0.3] * 4, selection)
            record_stats(store, f"t1-{seed}", {"t": 1.0, "loss_reduction": "mean"}, seed, [0.2, 0.2, 0.2, 0.6], selection)
            record_stats(store, f"t5-{seed}", {"t": 5.0, "loss_reduction": "mean"}, seed, [0.5, 0.5, 0.5, 0.5], selection)
            record_stats(store, f"sum-{seed}", {"t": 0.01, "loss_reduction": "sum"}, seed, [0.9] * 4, selection)
    with TestClient(create_app(path)) as client:
        data = client.get("/api/compare?scenario=chosen").json()
    chosen = {c["label"]: c["chosen"] for c in data["cells"]}
    assert [label for label, rule in chosen.items() if rule] == [f"{expected} loss_reduction=mean"], chosen
    assert ("validation_tail" in chosen[f"{expected} loss_reduction=mean"]) == (tail > 1)


def cells_by_key(data: dict) -> dict[str, dict]:
    return {c["key"]: c for c in data["cells"]}


def test_cells_that_differ_in_rounds_are_never_pooled_and_are_named_by_it(tmp_path):
    path = tmp_path / "r.db"
    with ResultsStore(path) as store:
        for seed in (0, 1):
            record(store, f"a5-{seed}", "term", {"t": 20.0}, seed, 0.4, rounds=2)
            record(store, f"a20-{seed}", "term", {"t": 20.0}, seed, 0.4, rounds=5)
            record(store, f"f5-{seed}", "fedavg", {}, seed, 1.0, rounds=2)
    with TestClient(create_app(path)) as client:
        data = client.get(f"/api/compare?scenario={SCENARIO}").json()
    assert sorted(c["label"] for c in data["cells"]) == ["fedavg rounds=2", "term t=20 rounds=2", "term t=20 rounds=5"]
    assert data["varying"] == ["run.rounds"]
    assert any("run.rounds: 2, 5" in n and "never pooled" in n for n in data["notices"])
    long = next(c for c in data["cells"] if c["label"] == "term t=20 rounds=5")
    assert long["n"] == 2 and sorted(long["run_ids"]) == ["a20-0", "a20-1"]
    assert long["reference"] is None  # no FedAvg with 5 rounds: no paired difference against the 2-round one
    short = next(c for c in data["cells"] if c["label"] == "term t=20 rounds=2")
    assert short["reference"] == next(c["key"] for c in data["cells"] if c["strategy"] == "fedavg")


def test_a_running_run_is_named_in_the_notices(tmp_path):
    path = tmp_path / "r.db"
    with ResultsStore(path) as store:
        record(store, "f", "fedavg", {}, 0, 1.0, finish=None)
    with TestClient(create_app(path)) as client:
        data = client.get("/api/compare?runs=f").json()
    assert any("is running at round 4 of 4" in n for n in data["notices"])
    assert any("One seed only" in n for n in data["notices"])


# -- CSV ------------------------------------------------------------------------


def read_csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_compare_cells_csv_has_every_statistic_with_its_error(client, sweep):
    response = client.get(f"/api/compare.csv?scenario={SCENARIO}&table=cells")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/csv")
    assert 'filename="compare-cells.csv"' in response.headers["content-disposition"]
    rows = {r["cell"]: r for r in read_csv(response.text)}
    assert list(rows) == ["fedavg", "qffl q=1", "qffl q=5", "term t=1", "term t=5"]
    values = [final(sweep[1], f"qffl-1-s{s}")["worst_10"] for s in SEEDS]
    row = rows["qffl q=1"]
    assert float(row["test.worst_10.mean"]) == pytest.approx(statistics.fmean(values), abs=1e-12)
    assert float(row["test.worst_10.se"]) == pytest.approx(se(values), abs=1e-12)
    assert row["n_seeds"] == "3" and row["seeds"] == "0 1 2" and row["q"] == "1.0"
    assert rows["term t=5"]["repeated_seeds"] == "0"
    assert rows["fedavg"]["test.worst_10.minus_fedavg.mean"] == "" and rows["fedavg"]["minus_fedavg"] == ""
    # the paired differences: the answer's numbers, as comparison.csv names them
    answer = {c["label"]: c for c in client.get(f"/api/compare?scenario={SCENARIO}").json()["cells"]}
    got = answer["qffl q=1"]["differences"]["fedavg"]["test"]["worst_10"]
    for field in ("mean", "se", "p_value", "p_holm", "p_signflip"):
        assert float(row[f"test.worst_10.minus_fedavg.{field}"]) == pytest.approx(got[field], rel=1e-12)
    assert [float(row[f"test.worst_10.minus_fedavg.ci95_{end}"]) for end in ("lo", "hi")] == pytest.approx(got["ci95"])
    assert row["minus_fedavg"] == answer["fedavg"]["key"]


def test_compare_curves_and_runs_csv(client):
    curves = read_csv(client.get(f"/api/compare.csv?scenario={SCENARIO}&table=curves").text)
    assert {r["statistic"] for r in curves} >= {"mean", "pooled_mean", "worst_10", "std", "cvar"}
    assert len([r for r in curves if r["cell"] == "fedavg" and r["split"] == "test" and r["statistic"] == "std"]) == ROUNDS
    answer = curves_of(client, f"scenario={SCENARIO}")  # the CSV holds the curves' answer, row for row
    expected = [(label, split, key, str(r), curve["mean"][i], curve["se"][i], str(curve["n"][i]))
                for label, cell in answer.items() for split, by_key in cell["curves"].items()
                for key, curve in by_key.items() for i, r in enumerate(curve["round"])]  # fmt: skip
    got = [(r["cell"], r["split"], r["statistic"], r["round"], float(r["mean"]), float(r["se"]) if r["se"] else None,
            r["n_seeds"]) for r in curves]  # fmt: skip
    assert got == expected
    runs = read_csv(client.get(f"/api/compare.csv?scenario={SCENARIO}&table=runs").text)
    assert len(runs) == len(SEEDS) * len(CELLS) + 1
    assert {r["counted"] for r in runs} == {"True", "False"}
    assert client.get(f"/api/compare.csv?scenario={SCENARIO}&table=nope").status_code == 422


def test_runs_csv_lists_every_matching_run_with_full_ids(client, sweep):
    rows = read_csv(client.get("/api/runs.csv?strategy=term").text)
    assert sorted(r["run_id"] for r in rows) == sorted(r for r in sweep[1] if r.startswith("term"))
    row = next(r for r in rows if r["run_id"] == "term-1-s2")
    assert float(row["test.worst_10"]) == pytest.approx(final(sweep[1], "term-1-s2")["worst_10"], abs=1e-12)
    assert row["t"] == "1.0" and row["test.round"] == str(ROUNDS) and row["status"] == "finished"


def test_device_rows_csv_has_one_row_per_round_and_device(client, sweep):
    response = client.get("/api/runs/term-1-s1/devices.csv")
    assert response.status_code == 200
    rows = read_csv(response.text)
    assert len(rows) == ROUNDS * DEVICES
    written = sweep[1]["term-1-s1"]["rounds"]
    for row in rows:
        r, k = int(row["round"]), int(row["partition_id"])
        assert float(row["test_accuracy"]) == pytest.approx(written[r]["accuracy"]["test"][k], abs=1e-12)
        assert float(row["val_loss"]) == pytest.approx(written[r]["loss"]["val"][k], abs=1e-12)
        if k in written[r]["weights"]:
            assert float(row["tilted_weight"]) == pytest.approx(written[r]["weights"][k], abs=1e-12)
            assert row["sampled"] == "True" and float(row["train_loss"]) == pytest.approx(0.1 * k + r)
        else:
            assert row["tilted_weight"] == "" and row["sampled"] == ""
    assert client.get("/api/runs/nope/devices.csv").status_code == 404


def test_rounds_csv_has_one_row_per_round_and_split(client, sweep):
    rows = read_csv(client.get("/api/runs/fedavg-s0/rounds.csv").text)
    assert [(r["round"], r["split"]) for r in rows] == [(str(r), s) for r in range(1, ROUNDS + 1) for s in ("test", "val")]
    assert float(rows[-1]["cvar"]) == pytest.approx(sweep[1]["fedavg-s0"]["rounds"][ROUNDS]["stats"]["val"]["cvar"])


# -- one device, one run --------------------------------------------------------


def test_device_history_follows_one_device_over_the_rounds(client, sweep):
    data = client.get("/api/runs/term-5-s2/devices/3").json()
    written = sweep[1]["term-5-s2"]["rounds"]
    assert data["name"] == "device 3"
    assert data["eval"]["test"]["round"] == list(range(1, ROUNDS + 1))
    assert data["eval"]["test"]["accuracy"] == pytest.approx([written[r]["accuracy"]["test"][3] for r in range(1, 5)])
    assert data["eval"]["val"]["examples"] == [60] * ROUNDS
    sampled = [r for r in range(1, ROUNDS + 1) if 3 in written[r]["weights"]]
    assert data["train"]["round"] == sampled
    assert data["train"]["tilted_weight"] == pytest.approx([written[r]["weights"][3] for r in sampled])
    assert data["train"]["num_examples"] == [60] * len(sampled)
    missing = client.get("/api/runs/term-5-s2/devices/99")
    assert missing.status_code == 404 and "device 99" in missing.json()["detail"]


def test_weights_carry_each_devices_size_and_final_loss_for_sorting(client, sweep):
    data = client.get("/api/runs/term-1-s0/weights").json()
    written = sweep[1]["term-1-s0"]
    assert data["examples"] == [float(written["examples"][p]) for p in data["partition_ids"]]
    assert data["loss"] == pytest.approx([written["rounds"][ROUNDS]["loss"]["test"][p] for p in data["partition_ids"]])
    assert data["loss_round"] == ROUNDS


def test_runs_are_paged_newest_first_with_a_total(client, sweep):
    first = client.get("/api/runs?limit=4")
    assert first.headers["x-total-count"] == str(len(sweep[1]))
    second = client.get("/api/runs?limit=4&offset=4").json()
    everything = client.get("/api/runs?limit=1000").json()
    assert [r["run_id"] for r in first.json() + second] == [r["run_id"] for r in everything[:8]]
    assert [r["run_id"] for r in client.get("/api/runs?q=QFFL-5").json()] == ["qffl-5-s2", "qffl-5-s1", "qffl-5-s0"]
    assert client.get("/api/runs?limit=0").status_code == 422


def test_the_runs_page_pages_and_filters_on_the_server(client, sweep, monkeypatch):
    import term_fl.dashboard.app as app_module

    html = client.get("/?strategy=qffl").text
    assert html.count('class="select-run"') == 6 and "runs 1–6 of 6" in html
    assert 'href="/api/runs.csv?strategy=qffl"' in html
    html = client.get("/?q=term-5").text
    assert "runs 1–4 of 4" in html and 'value="term-5"' in html
    monkeypatch.setattr(app_module, "PAGE_SIZE", 5)
    with TestClient(app_module.create_app(sweep[0])) as paged:
        page2 = paged.get("/?page=2").text
    assert "runs 6–10 of 16" in page2 and 'id="page-next"' in page2 and 'id="page-prev"' in page2


def test_a_failed_run_shows_its_error_and_no_longer_polls(tmp_path):
    path = tmp_path / "r.db"
    with ResultsStore(path) as store:
        record(store, "bad", "term", {"t": 1.0}, 0, 0.5, finish="failed")
    with TestClient(create_app(path)) as client:
        html = client.get("/runs/bad").text
        run = client.get("/api/runs/bad").json()
    assert 'id="run-error"' in html and "RuntimeError: boom" in html
    assert run["status"] == "failed" and run["error"] == "RuntimeError: boom"


# -- static report ---------------------------------------------------------------


def test_scenario_report_carries_the_comparison_and_its_csv(sweep, client, tmp_path):
    from test_dashboard import report_data

    html = write_report(sweep[0], SCENARIO, tmp_path / "r.html").read_text()
    data = report_data(html)
    assert data["compare"] == client.get(f"/api/compare?scenario={SCENARIO}").json()
    assert data["curves"] == client.get(f"/api/compare/curves?scenario={SCENARIO}&max_points=100").json()
    assert data["curves"]["cells"] == client.get(f"/api/compare/curves?scenario={SCENARIO}").json()["cells"]
    for table in ("cells", "runs"):  # the curves' CSV is built from data["curves"] in the browser
        assert data["csv"][table] == client.get(f"/api/compare.csv?scenario={SCENARIO}&table={table}").text
    for chart in ("chart-tradeoff-0", "chart-tradeoff-1", "chart-ecdf", "curves", "sweeps"):
        assert f'id="{chart}"' in html


def test_a_scenario_report_thins_long_curves_to_its_bound(sweep, client, tmp_path, monkeypatch):
    from test_dashboard import report_data

    from term_fl.dashboard import report

    monkeypatch.setattr(report, "REPORT_CURVE_POINTS", 3)
    data = report_data(write_report(sweep[0], SCENARIO, tmp_path / "r.html").read_text())
    assert data["curves"] == client.get(f"/api/compare/curves?scenario={SCENARIO}&max_points=3").json()
    cell = data["curves"]["cells"][0]
    assert cell["thinned"] and cell["evaluated_rounds"] == ROUNDS
    assert cell["curves"]["test"]["worst_10"]["round"] == [1, 3, 4]


def test_run_report_carries_every_device_history_and_the_csv(sweep, client, tmp_path):
    from test_dashboard import report_data

    data = report_data(write_report(sweep[0], "term-1-s1", tmp_path / "r.html").read_text())
    assert data["csv"]["devices"] == client.get("/api/runs/term-1-s1/devices.csv").text
    assert data["csv"]["rounds"] == client.get("/api/runs/term-1-s1/rounds.csv").text
    assert set(data["device_histories"]) == {str(k) for k in range(DEVICES)}
    assert data["device_histories"]["5"] == client.get("/api/runs/term-1-s1/devices/5").json()


def test_a_lost_run_says_why_on_its_page_and_in_the_comparison(tmp_path, monkeypatch):
    import term_fl.results.schema as results_module

    path = tmp_path / "r.db"
    with ResultsStore(path) as store:
        record(store, "quiet", "term", {"t": 1.0}, 0, 0.5, finish=None)
    monkeypatch.setattr(results_module, "LOST_AFTER_S", 0.0)  # every running run is silent too long
    with TestClient(create_app(path)) as client:
        run = client.get("/api/runs/quiet").json()
        html = client.get("/runs/quiet").text
        data = client.get("/api/compare?run=quiet").json()
    assert run["status"] == "lost" and "has not been heard of since" in run["status_note"]
    assert 'id="status-note"' in html and "has not been heard of since" in html
    assert any("is lost at round 4 of 4" in n for n in data["notices"])


def test_a_damaged_final_round_is_flagged_and_the_comparison_still_answers(tmp_path):
    import sqlite3

    path = tmp_path / "r.db"
    with ResultsStore(path) as store:
        written = {s: record(store, f"f{s}", "fedavg", {}, s, 1.0) for s in (0, 1)}
    with sqlite3.connect(path) as conn:
        conn.execute(f"UPDATE round_stats SET stats_json = 'oops' WHERE run_id = 'f1' AND round = {ROUNDS} AND split = 'test'")
    with TestClient(create_app(path)) as client:
        response = client.get("/api/compare?run=f0&run=f1")
        curves = curves_of(client, "run=f0&run=f1")
    assert response.status_code == 200
    data = response.json()
    assert {r["run_id"]: r["damaged"] for r in data["runs"]} == {"f0": [], "f1": ["stats_json"]}
    worst = data["cells"][0]["stats"]["test"]["worst_10"]
    assert worst["n"] == 1 and worst["mean"] == pytest.approx(written[0]["rounds"][ROUNDS]["stats"]["test"]["worst_10"])
    assert curves["fedavg"]["curves"]["test"]["worst_10"]["n"] == [2] * ROUNDS  # the columns are intact


def test_rounds_without_evaluation_are_gaps_not_zeros(tmp_path):
    """With an evaluate-every-N setting, rounds 1 and 3 train only: curves, the final round and the CSV know it."""
    path = tmp_path / "r.db"
    with ResultsStore(path) as store:
        store.create_run(run_id="every2", name="every2", scenario=SCENARIO, engine="inprocess", strategy="fedavg",
                         strategy_params={"tau": 0.0}, seed=0, config_hash="h", config={}, data={}, rounds_planned=4)  # fmt: skip
        rng = np.random.default_rng(0)
        for r in range(1, 5):
            evaluated = r % 2 == 0
            acc = rng.uniform(0.4, 0.9, DEVICES)
            examples = np.full(DEVICES, 10)
            stats = {"test": naive_stats(acc, np.round(acc * 10).astype(int), examples, 1 - acc)} if evaluated else {}
            rows = [{"partition_id": k, "split": "test", "loss": float(1 - acc[k]), "accuracy": float(acc[k]),
                     "correct": int(round(acc[k] * 10)), "examples": 10} for k in range(DEVICES)] if evaluated else []  # fmt: skip
            store.record_round("every2", r, train_rows=[{"partition_id": 0, "train_loss": 0.5, "tilted_weight": 1.0,
                                                          "num_examples": 10}], eval_rows=rows, stats=stats)  # fmt: skip
        store.finish_run("every2")
    with TestClient(create_app(path)) as client:
        data = client.get("/api/compare?run=every2").json()
        curves = curves_of(client, "run=every2")
        devices = client.get("/api/runs/every2/devices").json()
        rows = read_csv(client.get("/api/runs/every2/devices.csv").text)
    curve = curves["fedavg"]["curves"]["test"]["worst_10"]
    assert curve["round"] == [2, 4] and None not in curve["mean"]
    assert data["runs"][0]["final"]["test"]["round"] == 4
    assert devices["round"] == 4 and devices["rounds"] == [2, 4]
    assert [(r["round"], r["partition_id"]) for r in rows if r["test_accuracy"] == ""] == [("1", "0"), ("3", "0")]
