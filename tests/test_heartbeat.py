"""Heartbeats: a run that stops beating reads as `lost`; the schema-2 migration of a store written by schema 1."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import term_fl.results.schema as results_module
from term_fl.results import ResultsStore
from term_fl.runs.run import Heartbeat

V1_DUMP = Path(__file__).parent / "data" / "results_v1.sql"


def v1_store(path: Path) -> Path:
    """The store that term-fl 0.1 (results schema version 1) wrote, rebuilt from its dump."""
    with sqlite3.connect(path) as conn:
        conn.executescript(V1_DUMP.read_text())
    return path


def new_run(store: ResultsStore, run_id: str = "r") -> str:
    return store.create_run(run_id=run_id, name=run_id, scenario="s", engine="inprocess", strategy="fedavg",
                            strategy_params={}, seed=0, config_hash="h", config={}, data={}, rounds_planned=3)


def test_a_schema_1_store_is_read_as_it_is_without_a_change(tmp_path):
    path = v1_store(tmp_path / "v1.db")
    before = path.read_bytes()
    with ResultsStore.open_readonly(path) as reader:
        assert reader.version == 1
        runs = {r.run_id: r for r in reader.list_runs()}
        assert runs["v1-finished"].status == "finished" and runs["v1-finished"].heartbeat_at is None
        assert runs["v1-crashed"].status == "lost"  # running, started long ago, no heartbeat since
        assert reader.load_metrics("v1-finished")["accuracy"].tolist() == [0.75]
    assert path.read_bytes() == before


def test_opening_a_schema_1_store_for_writing_migrates_it_in_place(tmp_path, caplog):
    path = v1_store(tmp_path / "v1.db")
    with caplog.at_level("INFO", logger="term_fl"), ResultsStore(path) as store:
        assert store.version == results_module.SCHEMA_VERSION
        assert f"schema migrated from version 1 to {results_module.SCHEMA_VERSION}" in caplog.text
        finished = store.get_run("v1-finished")
        assert (finished.status, finished.rounds_completed, finished.summary) == (
            "finished", 1, {"run_id": "v1-finished", "status": "finished"})
        assert store.get_run("v1-crashed").status == "lost"
        assert store.load_rounds("v1-crashed")[0]["num_included"] == 1
        # the migrated store takes new runs and heartbeats
        new_run(store, "after-migration")
        assert store.heartbeat("after-migration")
        assert store.get_run("after-migration").status == "running"
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone() == (results_module.SCHEMA_VERSION,)
        assert "heartbeat_at" in [row[1] for row in raw.execute("PRAGMA table_info(runs)")]
        assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    with ResultsStore(path) as again:  # a second open finds nothing to migrate
        assert again.version == results_module.SCHEMA_VERSION and len(again.list_runs()) == 3


def test_a_run_without_a_recent_heartbeat_is_lost_and_a_new_heartbeat_brings_it_back(tmp_path, monkeypatch):
    monkeypatch.setattr(results_module, "LOST_AFTER_S", 0.3)
    with ResultsStore(tmp_path / "r.db") as store:
        new_run(store, "quiet")
        new_run(store, "done")
        store.finish_run("done")
        assert store.get_run("quiet").status == "running"
        time.sleep(0.5)
        assert store.get_run("quiet").status == "lost"
        assert [r.run_id for r in store.list_runs(status="lost")] == ["quiet"]
        assert store.list_runs(status="running") == []
        assert store.get_run("done").status == "finished"  # only running runs can be lost
        assert store.heartbeat("quiet")
        assert store.get_run("quiet").status == "running"
        assert [r.run_id for r in store.list_runs(status="running")] == ["quiet"]
        assert not store.heartbeat("done")  # a late beat after the end changes nothing


def test_recording_a_round_is_a_heartbeat(tmp_path, monkeypatch):
    with ResultsStore(tmp_path / "r.db") as store:
        new_run(store)
        first = store.get_run("r").heartbeat_at
        time.sleep(0.05)
        store.record_round("r", 1)
        assert store.get_run("r").heartbeat_at > first


def test_the_recorder_beats_between_rounds_and_stops_at_the_end(tmp_path):
    with ResultsStore(tmp_path / "r.db") as store:
        new_run(store)
        beat = Heartbeat(store, "r", every=0.1)
        stamps = set()
        deadline = time.monotonic() + 5
        while len(stamps) < 3 and time.monotonic() < deadline:
            stamps.add(store.get_run("r").heartbeat_at)
            time.sleep(0.05)
        beat.stop()
        assert len(stamps) >= 3  # no round recorded, yet the heartbeat moved
        last = store.get_run("r").heartbeat_at
        time.sleep(0.3)
        assert store.get_run("r").heartbeat_at == last


def test_a_sigkilled_run_shows_lost_to_a_reader_in_another_process(tmp_path, monkeypatch):
    """End to end: `term-fl run` killed after its first round; the store (and the dashboard) say lost."""
    from fastapi.testclient import TestClient

    from conftest import SMALL
    from term_fl.dashboard import create_app

    db = tmp_path / "r.db"
    sets = [a for item in [*SMALL, "run.rounds=100000", "run.engine=inprocess"] for a in ("--set", item)]
    proc = subprocess.Popen([sys.executable, "-m", "term_fl", "run", *sets, "--out", str(tmp_path / "o"),
                             "--db", str(db)], stdout=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if "round 1/" in line:
                break
        with ResultsStore.open_readonly(db) as reader:
            assert reader.list_runs()[0].status == "running"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    monkeypatch.setattr(results_module, "LOST_AFTER_S", 1.0)  # the stated limit is 60 s; a test waits less
    time.sleep(1.5)
    with ResultsStore.open_readonly(db) as reader:
        (run,) = reader.list_runs()
        assert run.status == "lost" and run.rounds_completed >= 1
    with TestClient(create_app(db)) as client:
        assert [r["status"] for r in client.get("/api/runs").json()] == ["lost"]
        assert [r["run_id"] for r in client.get("/api/runs?status=lost").json()] == [run.run_id]


@pytest.mark.parametrize("status", ["running", "lost"])
def test_the_dashboard_filters_by_the_derived_status(tmp_path, monkeypatch, status):
    from fastapi.testclient import TestClient

    from term_fl.dashboard import create_app

    with ResultsStore(tmp_path / "r.db") as store:
        new_run(store)
    monkeypatch.setattr(results_module, "LOST_AFTER_S", 0.0 if status == "lost" else 3600.0)
    time.sleep(0.01)
    with TestClient(create_app(tmp_path / "r.db")) as client:
        assert [r["status"] for r in client.get(f"/api/runs?status={status}").json()] == [status]
