"""A group of runs as one batched computation: each run records what it records alone, bit for bit.

The reference is every run on its own (``run_scenario``, ``term-fl sweep``
without ``--group-size``); a group must give the same rounds, rows,
statistics and final models, keep a failing run from stopping the others,
stop them all on Ctrl-C, and resume a sweep as the one-by-one sweep does.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import small_scenario
from term_fl.cli.commands import main
from term_fl.cli.sweep_groups import CellJob, plan_groups
from term_fl.engines import run_scenario
from term_fl.engines.group import group_key, run_group
from term_fl.federation.loop import Recorder
from term_fl.results import ResultsStore

pytest.importorskip("numba")


class _Rounds(Recorder):
    """Keeps every round's record, how the run ended; optionally raises in one round."""

    def __init__(self, raise_in: tuple[int, BaseException] | None = None) -> None:
        self.records, self.ended, self.raise_in = [], None, raise_in

    def record_round(self, record) -> None:
        if self.raise_in is not None and record.server_round == self.raise_in[0]:
            raise self.raise_in[1]
        self.records.append(record)

    def finish(self, status, result, error=None) -> None:
        self.ended = status


def _group(*extra: str):
    """Six runs that share one group: three strategies, two seeds (each seed its own data), tilted local loss."""
    return [small_scenario("run.executor=compiled", f"strategy.name={name}", f"run.seed={seed}", "run.rounds=5",
                           "run.evaluate_every=2", "client.tau=0.5", *extra)
            for name in ("fedavg", "term", "qffl") for seed in (0, 1)]


def _same_run(alone: _Rounds, grouped: _Rounds) -> bool:
    pairs = list(zip(alone.records, grouped.records, strict=True))
    return all(json.dumps([a.train_rows, a.eval_rows, a.stats, a.diagnostics, a.excluded], default=str)
               == json.dumps([b.train_rows, b.eval_rows, b.stats, b.diagnostics, b.excluded], default=str)
               for a, b in pairs)


def test_a_group_records_what_each_run_records_alone_bit_for_bit():
    scenarios = _group()
    assert len({group_key(s) for s in scenarios}) == 1 and group_key(scenarios[0]) is not None
    alone = []
    for scenario in scenarios:
        recorder = _Rounds()
        alone.append((recorder, run_scenario(scenario, recorder)))
    recorders = [_Rounds() for _ in scenarios]
    results = run_group(scenarios, recorders)
    for (single, result), grouped, outcome in zip(alone, recorders, results, strict=True):
        assert grouped.ended == "finished" and len(grouped.records) == 5 and _same_run(single, grouped)
        for name in result.arrays.keys():
            assert np.array_equal(result.arrays[name].numpy(), outcome.arrays[name].numpy())


def test_a_failing_run_stops_alone_and_the_others_finish_as_alone():
    scenarios = _group()[:3]
    recorders = [_Rounds(), _Rounds(raise_in=(2, RuntimeError("disk full"))), _Rounds()]
    results = run_group(scenarios, recorders)
    assert isinstance(results[1], RuntimeError) and recorders[1].ended == "failed"
    for i in (0, 2):
        alone = _Rounds()
        run_scenario(scenarios[i], alone)
        assert recorders[i].ended == "finished" and _same_run(alone, recorders[i])


def test_ctrl_c_in_one_run_records_every_run_interrupted_and_is_raised():
    scenarios = _group()[:3]
    recorders = [_Rounds(), _Rounds(raise_in=(3, KeyboardInterrupt())), _Rounds()]
    with pytest.raises(KeyboardInterrupt):
        run_group(scenarios, recorders)
    assert [r.ended for r in recorders] == ["interrupted"] * 3


@pytest.mark.parametrize("override", ["run.executor=cohort", "model.name=mlp", "run.engine=flower"])
def test_what_cannot_share_the_kernel_has_no_group(override):
    assert group_key(small_scenario("run.executor=compiled", override)) is None


def test_runs_of_different_groups_are_refused_naming_the_key():
    one, other = small_scenario("run.executor=compiled"), small_scenario("run.executor=compiled", "client.lr=0.5")
    with pytest.raises(ValueError, match="group_key"):
        run_group([one, other], [_Rounds(), _Rounds()])


def test_plan_groups_fills_groups_in_order_and_leaves_the_others_alone(tmp_path):
    cells = [small_scenario("run.executor=compiled", f"run.seed={s}") for s in range(5)]
    cells.insert(2, small_scenario("run.executor=cohort"))
    jobs = [CellJob(i, f"cell {i}", cell, tmp_path / str(i)) for i, cell in enumerate(cells, start=1)]
    planned = [[job.index for job in group] for group in plan_groups(jobs, 2)]
    assert planned == [[1, 2], [3], [4, 5], [6]]
    assert [[job.index for job in group] for group in plan_groups(jobs, 1)] == [[i] for i in range(1, 7)]
    with pytest.raises(ValueError, match="group_size"):
        plan_groups(jobs, 0)


def _sweep_file(tmp_path):
    path = tmp_path / "sweep.toml"
    path.write_text(
        'name = "mini"\n[run]\nrounds = 4\nclients_per_round = 3\nevaluate_every = 2\nexecutor = "compiled"\n'
        "[data]\nnum_devices = 6\nmax_samples = 60\ntrain_fraction = 0.6\nval_fraction = 0.2\ntest_fraction = 0.2\n"
        '[sweep]\n"strategy.name" = ["fedavg", "term", "qffl"]\n"strategy.t" = [1.0, 5.0]\n"run.seed" = [0, 1]\n'
    )
    return path


def _comparison(out) -> dict:
    """comparison.json without what differs run to run (run ids, wall time)."""
    data = json.loads((out / "comparison.json").read_text())
    data.pop("wall_time_s")
    for row in data["cells"] + data["selection_cells"]:
        row.pop("run_ids")
    return data


def test_a_grouped_sweep_writes_the_comparison_of_the_one_by_one_sweep_and_resumes(tmp_path, capsys):
    path = _sweep_file(tmp_path)
    one_by_one, grouped = tmp_path / "one", tmp_path / "grouped"
    assert main(["sweep", str(path), "--out", str(one_by_one), "--db", str(tmp_path / "one.db")]) == 0
    assert main(["sweep", str(path), "--out", str(grouped), "--db", str(tmp_path / "g.db"), "--group-size", "4"]) == 0
    printed = " ".join(capsys.readouterr().out.split())  # rich wraps long lines at the console's width
    assert printed.count("4 cells side by side") == 2  # 8 cells: fedavg, term t=1, term t=5, qffl x 2 seeds
    assert _comparison(grouped) == _comparison(one_by_one)
    store = ResultsStore.open_readonly(tmp_path / "g.db")
    assert len(store.list_runs(scenario="mini", status="finished")) == 8
    # run again: every cell is finished and skipped, nothing new in the store
    assert main(["sweep", str(path), "--out", str(grouped), "--db", str(tmp_path / "g.db"), "--group-size", "4"]) == 0
    again = capsys.readouterr().out
    assert again.count("already finished, skipped") == 8 and "side by side" not in again
    assert len(ResultsStore.open_readonly(tmp_path / "g.db").list_runs(scenario="mini")) == 8


def test_a_group_size_below_one_is_refused(tmp_path, capsys):
    code = main(["sweep", str(_sweep_file(tmp_path)), "--out", str(tmp_path / "o"), "--db", str(tmp_path / "d.db"),
                 "--group-size", "0"])
    assert code != 0 and "--group-size" in capsys.readouterr().err


def test_a_group_that_cannot_start_runs_its_cells_one_by_one(tmp_path, capsys, monkeypatch):
    """A cell's folder in use (or its data missing) stops the group before any run: every cell then runs
    on its own and the one at fault fails alone, as in a sweep without groups."""
    import term_fl.cli.sweep_groups as sweep_groups

    def refuse(*args, **kwargs):
        raise OSError("no space left on device")

    monkeypatch.setattr(sweep_groups, "run_many", refuse)
    path = _sweep_file(tmp_path)
    out, db = tmp_path / "grouped", tmp_path / "g.db"
    assert main(["sweep", str(path), "--out", str(out), "--db", str(db), "--group-size", "4"]) == 0
    printed = " ".join(capsys.readouterr().out.split())  # rich wraps long lines at the console's width
    assert printed.count("its cells run one by one") == 2
    assert len(ResultsStore.open_readonly(db).list_runs(scenario="mini", status="finished")) == 8
