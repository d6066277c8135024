"""Schema 3: a strategy's numbers live in rounds.diagnostics_json; a store that schema 2 wrote migrates in place."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from term_fl.results import SCHEMA_VERSION, ResultsStore

V2_DUMP = Path(__file__).parent / "data" / "results_v2.sql"
ESTIMATES = {1: 0.1 + 0.2, 2: 1 / 3}  # what the schema-2 writer stored for the TERM run (round 3 failed)


def v2_store(path: Path) -> Path:
    """The store that term-fl 0.2.0 before the reshaping (results schema version 2) wrote, rebuilt from its dump."""
    with sqlite3.connect(path) as conn:
        conn.executescript(V2_DUMP.read_text())
    return path


def diagnostics(store: ResultsStore, run_id: str) -> dict[int, dict]:
    return {r["round"]: r["diagnostics"] for r in store.load_rounds(run_id)}


def test_a_schema_2_store_is_read_as_it_is_without_a_change(tmp_path):
    path = v2_store(tmp_path / "v2.db")
    before = path.read_bytes()
    with ResultsStore.open_readonly(path) as reader:
        assert reader.version == 2
        assert diagnostics(reader, "v2-term") == {1: {"running_estimate": ESTIMATES[1]},
                                                  2: {"running_estimate": ESTIMATES[2]}, 3: {}}
        assert diagnostics(reader, "v2-fedavg") == {1: {}, 2: {}, 3: {}}
    assert path.read_bytes() == before


def test_opening_a_schema_2_store_for_writing_moves_the_running_estimate_into_diagnostics(tmp_path, caplog):
    path = v2_store(tmp_path / "v2.db")
    with sqlite3.connect(path) as raw:
        stored = dict(raw.execute("SELECT round, running_estimate FROM rounds WHERE run_id = 'v2-term'"))
    assert stored == {**ESTIMATES, 3: None}
    with caplog.at_level("INFO", logger="term_fl"), ResultsStore(path) as store:
        assert store.version == SCHEMA_VERSION  # through version 3 (this change) to the newest
        assert f"schema migrated from version 2 to {SCHEMA_VERSION}" in caplog.text
        migrated = diagnostics(store, "v2-term")
        assert migrated == {1: {"running_estimate": ESTIMATES[1]}, 2: {"running_estimate": ESTIMATES[2]}, 3: {}}
        assert migrated[1]["running_estimate"] == stored[1]  # every digit: 0.30000000000000004, not 0.3
        assert diagnostics(store, "v2-fedavg") == {1: {}, 2: {}, 3: {}}
        rounds = store.load_rounds("v2-term")
        assert [(r["status"], r["num_sampled"], r["num_included"]) for r in rounds] == [
            ("ok", 1, 1), ("ok", 1, 1), ("failed", 1, 0)]
        assert rounds[2]["excluded"] == [{"node_id": 7, "partition_id": 0, "reason": "error reply"}]
        # the migrated store takes new rounds with any strategy's diagnostics
        store.create_run(run_id="afl", name="afl", scenario="s", engine="inprocess", strategy="afl",
                         strategy_params={"lambda_lr": 0.1}, seed=0, config_hash="h", config={}, data={},
                         rounds_planned=1)
        store.record_round("afl", 1, diagnostics={"mixture_weights": [0.25, 0.75]})
        assert diagnostics(store, "afl") == {1: {"mixture_weights": [0.25, 0.75]}}
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        columns = [row[1] for row in raw.execute("PRAGMA table_info(rounds)")]
        assert "diagnostics_json" in columns and "running_estimate" not in columns
        assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert raw.execute("PRAGMA foreign_key_check").fetchall() == []
    with caplog.at_level("INFO", logger="term_fl"), ResultsStore(path) as again:  # nothing left to migrate
        caplog.clear()
        assert again.version == SCHEMA_VERSION and len(again.list_runs()) == 3
        assert "migrated" not in caplog.text


def test_a_new_store_has_the_columns_a_migrated_one_has(tmp_path):
    with ResultsStore(tmp_path / "new.db"):
        pass
    migrated = v2_store(tmp_path / "v2.db")
    ResultsStore(migrated).close()
    shapes = []
    for path in (tmp_path / "new.db", migrated):
        with sqlite3.connect(path) as raw:
            shapes.append({table: [row[1:4] for row in raw.execute(f"PRAGMA table_info({table})")]
                           for (table,) in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")})
    assert shapes[0] == shapes[1]
