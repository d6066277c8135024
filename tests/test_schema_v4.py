"""Results schema version 4: the loss risks get columns of their own; older stores migrate in place.

The version-3 store is the dump of one that term-fl wrote at schema version 3
(tests/data/results_v3.sql, made by ResultsStore at commit 55f2a62); the
expected risk values are read from the JSON that store holds.
"""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest

from term_fl.results import RISK_COLUMNS, SCHEMA_VERSION, ResultsStore

DATA = Path(__file__).parent / "data"


def from_dump(path: Path, version: int) -> Path:
    with sqlite3.connect(path) as conn:
        conn.executescript((DATA / f"results_v{version}.sql").read_text())
    return path


def risks_in_json(path: Path) -> dict[tuple[str, int, str], dict[str, float | None]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT run_id, round, split, stats_json FROM round_stats").fetchall()
    return {(r, n, s): {c: json.loads(text).get(c) for c in RISK_COLUMNS} for r, n, s, text in rows}


def test_a_version_3_store_is_read_as_it_is_and_its_curves_come_from_the_json(tmp_path):
    path = from_dump(tmp_path / "v3.db", 3)
    before = path.read_bytes()
    expected = risks_in_json(path)
    with ResultsStore.open_readonly(path) as reader:
        assert reader.version == 3
        sums = reader.round_stats_sums(["v3-finished", "v3-running"], ["cvar", "evar", "mean"])
    assert path.read_bytes() == before
    test = sums["test"]
    assert test["round"] == [1, 2]
    assert test["cvar"]["n"] == [2, 1]  # round 2: only the finished run has it
    assert test["cvar"]["sum"][0] == pytest.approx(expected[("v3-finished", 1, "test")]["cvar"] * 2)
    assert test["evar"]["n"] == [2, 0]  # the NaN EVaR of round 2 (JSON null) counts as missing


def test_opening_a_version_3_store_for_writing_adds_the_risk_columns_filled_from_the_json(tmp_path, caplog):
    path = from_dump(tmp_path / "v3.db", 3)
    expected = risks_in_json(path)
    with ResultsStore.open_readonly(path) as reader:
        before = reader.round_stats_sums(["v3-finished", "v3-running"], list(RISK_COLUMNS))
    with caplog.at_level("INFO", logger="term_fl"), ResultsStore(path) as store:
        assert store.version == SCHEMA_VERSION >= 4
        assert f"schema migrated from version 3 to {SCHEMA_VERSION}" in caplog.text
        assert store.round_stats_sums(["v3-finished", "v3-running"], list(RISK_COLUMNS)) == before
        assert store.get_run("v3-finished").status == "finished" and store.get_run("v3-finished").rounds_completed == 2
        # the migrated store takes new rounds, and writes their risks to the columns
        store.record_round("v3-running", 2, stats={"test": {"mean": 0.5, "var": 1.0, "cvar": 2.0, "evar": math.inf,
                                                             "tivar": 1.5}})  # fmt: skip
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert raw.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        rows = raw.execute(f"SELECT run_id, round, split, {', '.join(RISK_COLUMNS)} FROM round_stats").fetchall()
    for run_id, r, split, *values in rows:
        if (run_id, r, split) in expected:
            assert dict(zip(RISK_COLUMNS, values, strict=True)) == expected[(run_id, r, split)]
    new = next(v for r, n, s, *v in rows if (r, n, s) == ("v3-running", 2, "test"))
    assert new == [1.0, 2.0, None, 1.5]  # ±inf, as in the JSON, is NULL


@pytest.mark.parametrize("version", [1, 2])
def test_older_stores_migrate_to_version_4_in_one_go(tmp_path, version):
    path = from_dump(tmp_path / f"v{version}.db", version)
    with ResultsStore(path) as store:
        assert store.version == SCHEMA_VERSION
        assert len(store.list_runs()) == 2
        expected = {(r, n, sp): {c: s.get(c) for c in RISK_COLUMNS}
                    for r in (run.run_id for run in store.list_runs())
                    for sp in ("val", "test") for n, s in enumerate(store.load_round_stats(r, sp), start=1)}  # fmt: skip
    with sqlite3.connect(path) as raw:
        columns = [row[1] for row in raw.execute("PRAGMA table_info(round_stats)")]
        assert columns[columns.index("stats_json") + 1:][:4] == list(RISK_COLUMNS) and "heartbeat_at" in [r[1] for r in raw.execute("PRAGMA table_info(runs)")]
        assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        for run_id, r, split, *values in raw.execute(f"SELECT run_id, round, split, {', '.join(RISK_COLUMNS)} FROM round_stats"):
            want = expected.get((run_id, r, split))
            if want is not None:
                assert values == [None if v is None or v != v else pytest.approx(v) for v in want.values()]


def test_a_damaged_stats_row_does_not_stop_the_migration(tmp_path):
    path = from_dump(tmp_path / "v3.db", 3)
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE round_stats SET stats_json = '{oops' WHERE run_id = 'v3-finished' AND round = 1")
    with ResultsStore(path) as store:
        assert store.version == SCHEMA_VERSION
        sums = store.round_stats_sums(["v3-finished"], ["cvar"])
    assert sums["test"]["cvar"]["n"] == [0, 1]  # the damaged round has no value, the other one has


def test_a_fresh_store_has_the_columns_in_the_order_a_migrated_one_has(tmp_path):
    with ResultsStore(tmp_path / "new.db"):
        pass
    migrated = from_dump(tmp_path / "v3.db", 3)
    ResultsStore(migrated).close()

    def columns(path: Path) -> list[str]:
        with sqlite3.connect(path) as raw:
            return [row[1] for row in raw.execute("PRAGMA table_info(round_stats)")]

    assert columns(tmp_path / "new.db") == columns(migrated)


def test_reading_a_version_3_store_with_a_damaged_row_sums_the_others(tmp_path):
    path = from_dump(tmp_path / "v3.db", 3)
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE round_stats SET stats_json = '{oops' WHERE run_id = 'v3-finished' AND round = 1")
    expected = risks_in_json(from_dump(tmp_path / "clean.db", 3))
    with ResultsStore.open_readonly(path) as reader:
        sums = reader.round_stats_sums(["v3-finished", "v3-running"], ["cvar", "mean"])
    assert sums["test"]["cvar"]["n"] == [1, 1]  # round 1: the running run only; round 2: the finished one
    assert sums["test"]["cvar"]["sum"][0] == pytest.approx(expected[("v3-running", 1, "test")]["cvar"])
    assert sums["test"]["mean"]["n"] == [1, 1]
