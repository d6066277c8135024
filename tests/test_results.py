"""The results store (term_fl.results): what goes in comes out, a round is all or nothing,
readers never see half a round, and a bad file or a bad value is named in the error."""

from __future__ import annotations

import importlib.util
import math
import re
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from term_fl.results import (
    SCHEMA_VERSION,
    DuplicateRoundError,
    EvalRow,
    ResultsStore,
    RunInfo,
    RunNotFound,
    StoreError,
    TrainRow,
    new_run_id,
)

NAN = float("nan")
REPO = Path(__file__).resolve().parents[1]


def make_run(store: ResultsStore, **overrides) -> str:
    fields = dict(
        name="vehicle term t=1",
        scenario="vehicle",
        engine="inprocess",
        strategy="term",
        strategy_params={"t": 1.0, "lam": 1.0, "tau": 0.0},
        seed=1,
        config_hash="cfg-a",
        config={"run": {"rounds": 3}, "strategy": {"name": "term", "t": 1.0}},
        data={"name": "vehicle", "path": "/data/vehicle.json", "sha256": "ab" * 32},
        rounds_planned=3,
    )
    fields.update(overrides)
    return store.create_run(**fields)


def eval_rows(partitions, round_=1, splits=("val", "test")) -> list[EvalRow]:
    """Deterministic evaluation rows: accuracy encodes (round, partition, split)."""
    return [
        EvalRow(k, split, loss=0.1 * k + round_, accuracy=(round_ * 100 + k) / 1000 + (split == "val") / 10_000,
                correct=k + round_, examples=10 + k)
        for split in splits
        for k in partitions
    ]  # fmt: skip


def train_rows(partitions, round_=1) -> list[TrainRow]:
    return [TrainRow(k, True, True, 1.0 + k, 0.5 + k, 1 / len(partitions), 10 + k) for k in partitions]


def record(store, run_id, round_, partitions=range(4), **kwargs) -> None:
    store.record_round(
        run_id, round_, train_rows=train_rows(partitions, round_), eval_rows=eval_rows(partitions, round_), **kwargs
    )


@pytest.fixture
def db(tmp_path) -> Path:
    return tmp_path / "results.db"


@pytest.fixture
def store(db):
    with ResultsStore(db) as s:
        yield s


# -- round trip ------------------------------------------------------------------------------------


def test_values_in_equal_values_out_and_nan_reads_back_as_nan(store):
    run_id = make_run(store, run_dir="/runs/r1")
    train = [
        TrainRow(0, sampled=True, included=True, train_loss=0.7, train_loss_after=0.2, tilted_weight=0.6,
                 num_examples=120),
        {"partition_id": 3, "sampled": 1, "included": 0, "train_loss": NAN, "train_loss_after": None,
         "tilted_weight": None, "num_examples": None},
        {"partition_id": 5, "train_loss": float("inf")},  # defaults: sampled, included True; the rest None
    ]  # fmt: skip
    evals = [
        EvalRow(0, "test", loss=0.25, accuracy=0.875, correct=7, examples=8),
        {"partition_id": 5, "split": "test", "loss": NAN, "accuracy": 0.5, "correct": 1, "examples": 2},
        EvalRow(0, "val", loss=1.5, accuracy=None, correct=0, examples=3),
    ]
    stats = {
        "test": {"mean": 0.6875, "pooled_mean": 0.8, "worst_10": 0.5, "best_10": 0.875, "std": 0.1875,
                 "K": 2, "evar": NAN, "evar_t": float("inf"), "alpha": 0.1},
        "val": {"mean": NAN, "K": 1},
    }  # fmt: skip
    excluded = [{"node_id": 123456789, "partition_id": 7, "reason": "non-finite train_loss"}]
    store.record_round(
        run_id, 1, train_rows=train, eval_rows=evals, stats=stats, diagnostics={"running_estimate": 0.75}, duration_s=1.25,
        excluded=excluded,
    )  # fmt: skip

    metrics = store.load_metrics(run_id, "test")
    assert metrics["round"].tolist() == [1, 1]
    assert metrics["partition_id"].tolist() == [0, 5]
    np.testing.assert_array_equal(metrics["loss"], [0.25, NAN])
    np.testing.assert_array_equal(metrics["accuracy"], [0.875, 0.5])
    assert metrics["correct"].tolist() == [7, 1] and metrics["examples"].tolist() == [8, 2]
    assert metrics["round"].dtype == np.int64 and metrics["loss"].dtype == np.float64
    val = store.load_metrics(run_id, "val")
    assert val["partition_id"].tolist() == [0] and math.isnan(val["accuracy"][0])

    t = store.load_train(run_id)
    assert t["partition_id"].tolist() == [0, 3, 5]
    assert t["sampled"].tolist() == [True, True, True] and t["included"].tolist() == [True, False, True]
    np.testing.assert_array_equal(t["train_loss"], [0.7, NAN, np.inf])
    np.testing.assert_array_equal(t["train_loss_after"], [0.2, NAN, NAN])
    np.testing.assert_array_equal(t["tilted_weight"], [0.6, NAN, NAN])
    np.testing.assert_array_equal(t["num_examples"], [120, NAN, NAN])

    (test_stats,) = store.load_round_stats(run_id, "test")
    assert test_stats["round"] == 1 and test_stats["K"] == 2 and test_stats["mean"] == 0.6875
    assert math.isnan(test_stats["evar"]) and math.isnan(test_stats["evar_t"])  # no ±inf in JSON: read as NaN
    (val_stats,) = store.load_round_stats(run_id, "val")
    assert math.isnan(val_stats["mean"])

    assert store.load_rounds(run_id) == [
        {"round": 1, "status": "ok", "num_sampled": 3, "num_included": 2,
         "duration_s": 1.25, "excluded": excluded, "diagnostics": {"running_estimate": 0.75}}
    ]  # fmt: skip

    info = store.get_run(run_id)
    assert info.status == "running" and info.rounds_completed == 1 and info.finished_at is None
    assert info.strategy_params == {"t": 1.0, "lam": 1.0, "tau": 0.0}
    assert info.config == {"run": {"rounds": 3}, "strategy": {"name": "term", "t": 1.0}}
    assert info.data == {"name": "vehicle", "path": "/data/vehicle.json", "sha256": "ab" * 32}
    assert (info.seed, info.config_hash, info.run_dir, info.summary) == (1, "cfg-a", "/runs/r1", None)

    summary = {"run_id": run_id, "test": {"mean": 0.6875, "tivar": NAN}, "versions": {"numpy": np.__version__}}
    store.finish_run(run_id, "finished", summary=summary)
    done = store.get_run(run_id)
    assert done.status == "finished" and done.finished_at >= done.started_at and done.error is None
    assert done.summary == {"run_id": run_id, "test": {"mean": 0.6875, "tivar": None}, "versions": summary["versions"]}


def test_numpy_scalars_and_integral_floats_are_stored_as_numbers(store, db):
    run_id = make_run(store)
    store.record_round(
        run_id, np.int64(1),
        train_rows=[{"partition_id": np.int64(2), "sampled": np.True_, "included": np.bool_(False),
                     "train_loss": np.float32(0.5), "train_loss_after": np.float64(0.25),
                     "tilted_weight": np.float32("nan"), "num_examples": np.int32(9)}],
        eval_rows=[EvalRow(np.int64(2), "test", np.float32(0.5), np.float64(0.75), np.int64(3), 4.0)],
        stats={"test": {"mean": np.float32(0.75), "K": np.int64(1), "weights": np.array([0.5, np.nan])}},
    )  # fmt: skip
    t = store.load_train(run_id)
    assert t["partition_id"].tolist() == [2] and t["sampled"].tolist() == [True] and t["included"].tolist() == [False]
    assert t["train_loss"].tolist() == [0.5] and math.isnan(t["tilted_weight"][0]) and t["num_examples"][0] == 9
    m = store.load_metrics(run_id)
    assert (m["correct"][0], m["examples"][0], m["accuracy"][0]) == (3, 4, 0.75)
    (stats,) = store.load_round_stats(run_id)
    assert stats["mean"] == 0.75 and stats["K"] == 1 and stats["weights"][0] == 0.5 and math.isnan(stats["weights"][1])
    with sqlite3.connect(db) as raw:  # numpy scalars bind as BLOBs in sqlite3: none may slip through
        types = raw.execute(
            "SELECT typeof(partition_id), typeof(sampled), typeof(train_loss), typeof(num_examples) FROM device_train"
        ).fetchall()
    assert types == [("integer", "integer", "real", "integer")]


def test_failed_round_without_rows_is_recorded_and_counted(store):
    run_id = make_run(store)
    store.record_round(run_id, 1, status="failed", excluded=[{"node_id": 1, "partition_id": 0, "reason": "timeout"}])
    (r,) = store.load_rounds(run_id)
    assert (r["status"], r["num_sampled"], r["num_included"]) == ("failed", 0, 0)
    assert r["diagnostics"] == {} and math.isnan(r["duration_s"])
    assert store.get_run(run_id).rounds_completed == 1
    assert store.load_metrics(run_id)["round"].size == 0 and store.load_round_stats(run_id) == []


def test_ten_thousand_devices_round_trip(store):
    run_id = make_run(store)
    partitions = range(10_000)
    record(store, run_id, 1, partitions)
    m = store.load_metrics(run_id)
    assert m["partition_id"].tolist() == list(partitions)
    assert m["correct"].sum() == sum(k + 1 for k in partitions)
    assert store.load_train(run_id)["partition_id"].size == 10_000
    assert store.load_rounds(run_id)[0]["num_sampled"] == 10_000


def test_bench_store_reports_the_median_write_time(tmp_path):
    spec = importlib.util.spec_from_file_location("store_bench", REPO / "benchmarks" / "store_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)  # benchmarks/ is not on the tests' import path
    result = bench.bench_store(num_devices=200, rounds=3, path=tmp_path / "bench.db")
    assert result["rounds"] == 3 and result["rows_per_round"] == 600
    assert 0 < result["min_s"] <= result["median_s"] <= result["max_s"]


def test_a_run_name_with_markup_and_any_characters_round_trips_unchanged(store):
    names = ["<script>alert(1)</script>", 'it\'s "quoted"; DROP TABLE runs; --', "tilt ∞ · 日本\nline 2\x00end"]
    ids = [make_run(store, name=name) for name in names]
    assert [store.get_run(i).name for i in ids] == names


# -- listing ---------------------------------------------------------------------------------------


def test_list_runs_filters_and_sorts_newest_first(store):
    a = make_run(store, run_id="a", scenario="vehicle", config_hash="h1")
    b = make_run(store, run_id="b", scenario="synthetic", config_hash="h2")
    c = make_run(store, run_id="c", scenario="vehicle", config_hash="h1", seed=2)
    store.finish_run(a, "finished")
    store.finish_run(b, "failed", error="RuntimeError: boom")

    runs = store.list_runs()
    assert all(isinstance(r, RunInfo) for r in runs)
    assert [r.run_id for r in runs] == [c, b, a]
    assert [r.started_at for r in runs] == sorted((r.started_at for r in runs), reverse=True)
    assert [r.run_id for r in store.list_runs(scenario="vehicle")] == [c, a]
    assert [r.run_id for r in store.list_runs(config_hash="h1")] == [c, a]
    assert [r.run_id for r in store.list_runs(status="running")] == [c]
    assert [r.run_id for r in store.list_runs(scenario="vehicle", status="finished")] == [a]
    assert store.list_runs(scenario="nope") == []
    assert store.get_run(b).error == "RuntimeError: boom"
    with pytest.raises(ValueError, match="status must be one of"):
        store.list_runs(status="done")


def test_new_run_ids_are_time_sortable_and_distinct(store):
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", new_run_id())
    assert new_run_id(0.0).startswith("19700101-000000-")
    assert new_run_id(1_000_000_000) < new_run_id(1_000_000_001)
    ids = {make_run(store) for _ in range(5)}
    assert len(ids) == 5 and all(re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", i) for i in ids)
    with pytest.raises(StoreError, match="already exists"):
        make_run(store, run_id=ids.pop())


# -- errors ----------------------------------------------------------------------------------------


def test_unknown_run_is_a_key_error_naming_the_id(store):
    with pytest.raises(RunNotFound, match="no run 'missing-run'") as info:
        store.get_run("missing-run")
    assert isinstance(info.value, KeyError) and "'missing-run'" in str(info.value)
    for call in (
        lambda: record(store, "missing-run", 1),
        lambda: store.finish_run("missing-run"),
        lambda: store.load_metrics("missing-run"),
        lambda: store.load_train("missing-run"),
        lambda: store.load_rounds("missing-run"),
        lambda: store.load_round_stats("missing-run"),
        lambda: store.device_matrix("missing-run"),
    ):
        with pytest.raises(RunNotFound, match="missing-run"):
            call()


def test_recording_a_round_twice_is_an_error_naming_run_and_round(store):
    run_id = make_run(store)
    record(store, run_id, 1)
    before = store.load_metrics(run_id)
    with pytest.raises(DuplicateRoundError, match=rf"round 1 of run '{run_id}' is already recorded"):
        record(store, run_id, 1, partitions=range(10))
    after = store.load_metrics(run_id)
    assert all(np.array_equal(before[k], after[k], equal_nan=True) for k in before)
    assert store.get_run(run_id).rounds_completed == 1


def test_a_finished_run_takes_no_more_rounds_and_finishes_once(store):
    run_id = make_run(store)
    store.finish_run(run_id, "interrupted", error="interrupted by the user")
    with pytest.raises(StoreError, match="the run is interrupted, not running"):
        record(store, run_id, 1)
    with pytest.raises(StoreError, match="interrupted, not running"):
        store.finish_run(run_id, "finished")
    with pytest.raises(ValueError, match="finishes as one of"):
        store.finish_run(make_run(store), "done")


@pytest.mark.parametrize(
    ("bad_row", "message"),
    [
        ({"partition_id": 9, "split": "test", "loss": 0.1, "accuracy": "high", "correct": 1, "examples": 2},
         r"eval_rows\[8\]\['accuracy'\]: expected a number, got 'high'"),
        ({"partition_id": 9, "split": "train", "loss": 0.1, "accuracy": 0.5, "correct": 1, "examples": 2},
         r"eval_rows\[8\]\['split'\]: split must be one of"),
        ({"partition_id": 9, "split": "test", "loss": 0.1, "accuracy": 0.5, "correct": 1.5, "examples": 2},
         r"eval_rows\[8\]\['correct'\]: expected an integer, got 1.5"),
        ({"partition-id": 9, "split": "test", "loss": 0.1, "accuracy": 0.5, "correct": 1, "examples": 2},
         r"eval_rows\[8\] has unknown keys \['partition-id'\]"),
        ({"partition_id": 9, "split": "test", "loss": 0.1, "accuracy": 0.5, "correct": 1},
         r"eval_rows\[8\] has no 'examples'"),
    ],
)  # fmt: skip
def test_a_bad_value_mid_round_stores_nothing_of_the_round(store, bad_row, message):
    run_id = make_run(store)
    record(store, run_id, 1)
    rows = [*eval_rows(range(4), 2), bad_row]  # train rows and 8 eval rows go in before it fails
    with pytest.raises(ValueError, match=message):
        store.record_round(run_id, 2, train_rows=train_rows(range(4), 2), eval_rows=rows, stats={"test": {"mean": 1}})
    assert [r["round"] for r in store.load_rounds(run_id)] == [1]
    assert set(store.load_metrics(run_id)["round"].tolist()) == {1}
    assert set(store.load_train(run_id)["round"].tolist()) == {1}
    assert store.load_round_stats(run_id) == [] and store.get_run(run_id).rounds_completed == 1
    record(store, run_id, 2)  # nothing was left behind: the round can be recorded now
    assert [r["round"] for r in store.load_rounds(run_id)] == [1, 2]


def test_a_database_error_mid_round_rolls_the_round_back(store):
    run_id = make_run(store)
    record(store, run_id, 1)
    twice = eval_rows(range(4), 2) + eval_rows([3], 2, splits=("test",))  # the key (round, test, 3) twice
    with pytest.raises(StoreError, match=rf"round 2 of run '{run_id}' was not recorded: UNIQUE constraint"):
        store.record_round(run_id, 2, train_rows=train_rows(range(4), 2), eval_rows=twice)
    assert [r["round"] for r in store.load_rounds(run_id)] == [1]
    assert store.load_train(run_id)["round"].tolist() == [1] * 4


def test_a_process_killed_mid_round_leaves_the_run_running_with_its_completed_rounds(db):
    script = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(REPO)!r})
        from term_fl.results import EvalRow, ResultsStore, TrainRow

        class DiesWhenRead:  # the process dies inside record_round's transaction, after rows went in
            @property
            def partition_id(self):
                os._exit(1)

        store = ResultsStore({str(db)!r})
        run_id = store.create_run(name="crash", scenario="s", engine="e", strategy="fedavg", strategy_params={{}},
                                  seed=0, config_hash="h", config={{}}, data={{}}, rounds_planned=5, run_id="crash")
        for r in (1, 2, 3):
            evals = [EvalRow(k, "test", 0.5, 0.5, 1, 2) for k in range(100)]
            store.record_round(run_id, r, train_rows=[TrainRow(k) for k in range(100)],
                               eval_rows=evals + ([DiesWhenRead()] if r == 3 else []))
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    with ResultsStore.open_readonly(db) as reader:
        info = reader.get_run("crash")
        assert (info.status, info.rounds_completed, info.finished_at) == ("running", 2, None)
        assert [r["round"] for r in reader.load_rounds("crash")] == [1, 2]
        assert np.bincount(reader.load_metrics("crash")["round"]).tolist() == [0, 100, 100]
        assert np.bincount(reader.load_train("crash")["round"]).tolist() == [0, 100, 100]
        assert [r.run_id for r in reader.list_runs(status="running")] == ["crash"]
    with ResultsStore(db) as writer:  # the writer's lock died with it: the run can be closed now
        writer.finish_run("crash", "interrupted", error="server process died")
        assert writer.get_run("crash").status == "interrupted"


# -- read-only opening -----------------------------------------------------------------------------


def test_read_only_store_reads_and_refuses_to_write(store, db):
    run_id = make_run(store)
    record(store, run_id, 1)
    with ResultsStore.open_readonly(db) as reader:
        assert reader.readonly and reader.get_run(run_id).name == "vehicle term t=1"
        assert reader.load_metrics(run_id)["partition_id"].tolist() == [0, 1, 2, 3]
        for write in (
            lambda: make_run(reader),
            lambda: record(reader, run_id, 2),
            lambda: reader.finish_run(run_id),
        ):
            with pytest.raises(StoreError, match="opened read-only"):
                write()
        with pytest.raises(sqlite3.OperationalError, match="readonly"):  # the connection itself is read-only
            reader._conn.execute("DELETE FROM runs")
    assert store.get_run(run_id).status == "running"


def test_read_only_open_of_a_missing_file_names_it_and_creates_nothing(tmp_path):
    missing = tmp_path / "nowhere" / "results.db"
    with pytest.raises(StoreError, match=re.escape(str(missing))):
        ResultsStore.open_readonly(missing)
    assert not missing.exists() and not missing.parent.exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"this is not a database, it is garbage\x00\xff" * 100, "is not a term-fl results database"),
        (b"", "is an empty SQLite database"),
    ],
)
def test_opening_a_file_that_is_not_a_store_is_a_clear_error(tmp_path, content, message):
    path = tmp_path / "results.db"
    path.write_bytes(content)
    with pytest.raises(StoreError, match=message) as info:
        ResultsStore.open_readonly(path)
    assert str(path) in str(info.value)
    if content:
        with pytest.raises(StoreError, match=message):
            ResultsStore(path)
        assert path.read_bytes() == content


def test_a_sqlite_file_of_another_schema_is_refused(tmp_path, db):
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as raw:
        raw.execute("CREATE TABLE runs (id INTEGER)")
    for open_ in (ResultsStore, ResultsStore.open_readonly):
        with pytest.raises(StoreError, match="not a term-fl results store"):
            open_(other)
    ResultsStore(db).close()
    with sqlite3.connect(db) as raw:
        raw.execute("PRAGMA user_version = 99")
    with pytest.raises(StoreError, match=r"schema version 99.*reads versions 1, 2, 3, 4.*newer term-fl"):
        ResultsStore.open_readonly(db)


def test_store_file_is_in_wal_mode_with_foreign_keys_on(store, db):
    assert store._conn.execute("PRAGMA foreign_keys").fetchone() == (1,)
    with sqlite3.connect(db) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert raw.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)


# -- device matrix ---------------------------------------------------------------------------------


def test_device_matrix_places_values_and_fills_missing_devices_with_nan(store):
    run_id = make_run(store)
    record(store, run_id, 1, partitions=[0, 2])
    record(store, run_id, 2, partitions=[1, 2, 5])
    store.record_round(run_id, 4, train_rows=train_rows([5]), eval_rows=eval_rows([5], 4, splits=("val",)))

    rounds, partitions, acc = store.device_matrix(run_id, "accuracy", "test")
    assert rounds.tolist() == [1, 2] and partitions.tolist() == [0, 1, 2, 5]
    expected = np.array([[0.100, NAN, 0.102, NAN], [NAN, 0.201, 0.202, 0.205]])
    np.testing.assert_allclose(acc, expected)
    assert np.array_equal(np.isnan(acc), np.isnan(expected))

    rounds, partitions, loss = store.device_matrix(run_id, "loss", "val")
    assert rounds.tolist() == [1, 2, 4] and loss.shape == (3, 4) and loss[2, 3] == pytest.approx(4.5)
    rounds, partitions, weight = store.device_matrix(run_id, "tilted_weight")
    assert rounds.tolist() == [1, 2, 4] and partitions.tolist() == [0, 1, 2, 5]
    assert weight[0, 0] == 0.5 and weight[2, 3] == 1.0 and np.isnan(weight[2, :3]).all()
    with pytest.raises(ValueError, match="column must be one of"):
        store.device_matrix(run_id, "accuracy; DROP TABLE runs")
    empty = make_run(store)
    r, p, m = store.device_matrix(empty)
    assert r.size == 0 and p.size == 0 and m.shape == (0, 0)


# -- concurrency -----------------------------------------------------------------------------------


def test_a_reader_during_a_write_sees_only_complete_rounds(store, db):
    run_id = make_run(store)
    record(store, run_id, 1)
    mid_round, resume = threading.Event(), threading.Event()

    class PausesWhenRead:  # record_round reads it after the train rows and 4 eval rows went in
        split, loss, accuracy, correct, examples = "test", 0.5, 0.5, 1, 2

        @property
        def partition_id(self):
            mid_round.set()
            assert resume.wait(10)
            return 99

    rows = [*eval_rows(range(4), 2, splits=("val",)), PausesWhenRead()]
    writer = threading.Thread(
        target=store.record_round, args=(run_id, 2), kwargs=dict(train_rows=train_rows(range(4), 2), eval_rows=rows)
    )
    writer.start()
    try:
        assert mid_round.wait(10)
        with ResultsStore.open_readonly(db) as reader:
            assert [r["round"] for r in reader.load_rounds(run_id)] == [1]
            assert reader.load_metrics(run_id, "val")["round"].tolist() == [1] * 4
            assert reader.load_train(run_id)["round"].tolist() == [1] * 4
            assert reader.get_run(run_id).rounds_completed == 1
            resume.set()
            writer.join(10)
            assert [r["round"] for r in reader.load_rounds(run_id)] == [1, 2]
            assert reader.load_metrics(run_id, "val")["round"].tolist() == [1] * 4 + [2] * 4
            assert reader.load_metrics(run_id, "test")["partition_id"].tolist() == [0, 1, 2, 3, 99]
    finally:
        resume.set()
        writer.join(10)


def test_readers_polling_while_rounds_are_written_never_see_a_partial_round(store, db):
    run_id = make_run(store)
    partitions = range(300)
    seen: list[int] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def poll() -> None:
        try:
            with ResultsStore.open_readonly(db) as reader:
                while not done.is_set():
                    counts = np.bincount(reader.load_metrics(run_id)["round"], minlength=1)[1:]
                    assert set(counts.tolist()) <= {len(partitions)}, counts
                    seen.append(len(counts))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=poll)
    thread.start()
    for r in range(1, 21):
        record(store, run_id, r, partitions)
    done.set()
    thread.join(10)
    assert not errors, errors[0]
    assert seen == sorted(seen)


def test_one_store_may_be_shared_by_a_writer_and_reader_threads(store):
    run_id = make_run(store)
    results: list[int] = []

    def read() -> None:
        for _ in range(20):
            results.append(len(store.load_rounds(run_id)))

    readers = [threading.Thread(target=read) for _ in range(3)]
    for t in readers:
        t.start()
    for r in range(1, 11):
        record(store, run_id, r)
    for t in readers:
        t.join(10)
    assert len(results) == 60 and max(results) <= 10
    assert store.get_run(run_id).rounds_completed == 10


def test_a_closed_store_opens_read_only_in_a_read_only_folder(tmp_path):
    """The dashboard's mount may be read-only: no -wal/-shm files may be needed."""
    import os
    import stat

    folder = tmp_path / "ro"
    folder.mkdir()
    with ResultsStore(folder / "r.db") as store:
        store.create_run(name="n", scenario="s", engine="inprocess", strategy="fedavg", strategy_params={},
                         seed=0, config_hash="h", config={}, data={}, rounds_planned=1, run_id="r1")
    assert not (folder / "r.db-wal").exists()
    os.chmod(folder, stat.S_IRUSR | stat.S_IXUSR)
    try:
        if os.access(folder, os.W_OK):
            pytest.skip("running as a user who can write anywhere (root): the permission cannot be tested")
        assert ResultsStore.open_readonly(folder / "r.db").get_run("r1").name == "n"
    finally:
        os.chmod(folder, stat.S_IRWXU)


def _hold_read_transaction(path):
    import sqlite3 as _sqlite3

    reader = _sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM runs").fetchall()  # a shared lock while the transaction is open
    return reader


def test_a_busy_store_is_waited_for_with_a_message_not_called_corrupt(tmp_path, caplog, monkeypatch):
    import threading

    import term_fl.results.schema as results_module

    monkeypatch.setattr(results_module, "BUSY_POLL_S", 0.2)  # each try waits 0.2 s: the message comes early

    path = tmp_path / "busy.db"
    ResultsStore(path).close()  # the last writer leaves rollback-journal mode: a reader's lock blocks a writer
    reader = _hold_read_transaction(path)
    threading.Timer(1.0, lambda: reader.execute("COMMIT")).start()
    with caplog.at_level("WARNING", logger="term_fl"):
        with ResultsStore(path) as store:
            make_run(store)
    assert f"waiting for the results database {path}" in caplog.text
    reader.close()


def test_a_store_that_stays_busy_says_busy(tmp_path, monkeypatch):
    import term_fl.results.schema as results_module

    monkeypatch.setattr(results_module, "BUSY_TIMEOUT_S", 0.5)
    monkeypatch.setattr(results_module, "BUSY_POLL_S", 0.1)
    path = tmp_path / "busy.db"
    ResultsStore(path).close()
    reader = _hold_read_transaction(path)
    try:
        with pytest.raises(StoreError) as err:
            ResultsStore(path)
        assert "is busy" in str(err.value) and "not damaged" in str(err.value)
        assert "not a term-fl results database" not in str(err.value)
    finally:
        reader.close()


def test_a_write_that_waits_for_another_writer_says_so(tmp_path, caplog, monkeypatch):
    """A round waits while another connection holds the write lock: within seconds the wait is said, not silent
    for up to a minute, and the round is written once the lock is free."""
    import sqlite3 as _sqlite3
    import threading

    import term_fl.results.schema as results_module

    monkeypatch.setattr(results_module, "BUSY_POLL_S", 0.2)
    path = tmp_path / "busy.db"
    with ResultsStore(path) as store:
        run_id = make_run(store)
        other = _sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")  # another writer (WAL: readers never block a writer)
        threading.Timer(1.0, lambda: other.execute("COMMIT")).start()
        with caplog.at_level("WARNING", logger="term_fl"):
            store.record_round(run_id, 1)
        assert store.get_run(run_id).rounds_completed == 1
    assert f"waiting for the results database {path}" in caplog.text
    other.close()


def test_the_busy_store_warning_reaches_the_terminal(tmp_path, capsys, monkeypatch):
    """Every command prints term-fl's own warnings on stderr (the dashboard and `term-fl runs` had no handler)."""
    import threading

    import term_fl.results.schema as results_module
    from term_fl.cli.commands import main

    monkeypatch.setattr(results_module, "BUSY_POLL_S", 0.2)
    path = tmp_path / "busy.db"
    ResultsStore(path).close()
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")  # a writer mid-commit in rollback-journal mode: readers wait
    threading.Timer(1.0, lambda: holder.execute("COMMIT")).start()
    assert main(["runs", "--db", str(path)]) == 0
    assert f"term-fl: warning: waiting for the results database {path}" in capsys.readouterr().err
    holder.close()
