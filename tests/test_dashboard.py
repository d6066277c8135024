"""The fairness dashboard and the static report, on a results store these tests fill themselves.

Expected numbers (final statistics, mean and standard error over seeds) are
computed here from the generated device accuracies, not read back through
the dashboard's own code.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from term_fl.dashboard import ReportError, create_app, write_report
from term_fl.dashboard.render import STATIC_DIR, inline_script, script_json
from term_fl.maths.fairness import GROUPS
from term_fl.results import ResultsStore, StoreError

XSS = "<script>alert(1)</script>"
SCENARIO = "vehicle"
# (run_id, strategy, params, seed, name, rounds to record, rounds planned, finish?)
RUNS = [
    ("fedavg-1", "fedavg", {"tau": 0.0}, 1, "fedavg seed 1", None, None, True),
    ("fedavg-2", "fedavg", {"tau": 0.0}, 2, "fedavg seed 2", None, None, True),
    ("qffl-1", "qffl", {"q": 1.0, "tau": 0.0}, 1, "qffl q=1 seed 1", None, None, True),
    ("term-1", "term", {"t": 1.0, "lam": 1.0, "tau": 0.0}, 1, "term t=1 seed 1", None, None, True),
    ("term-2", "term", {"t": 1.0, "lam": 1.0, "tau": 0.0}, 2, "term t=1 seed 2", None, None, True),
    # same cell as term-1/2, still running, with a hostile name
    ("term-3", "term", {"t": 1.0, "lam": 1.0, "tau": 0.0}, 3, XSS, 2, 4, False),
]
SPREAD = {"fedavg": 1.0, "qffl": 0.6, "term": 0.45}  # how far the worst devices fall behind


# -- a store filled by hand ------------------------------------------------------


def naive_stats(accuracy: np.ndarray, correct: np.ndarray, examples: np.ndarray, loss: np.ndarray) -> dict:
    """The fairness statistics and loss risks, typed from docs/maths.md (worst 10% = floor(0.1 K), at least 1)."""
    k = len(accuracy)
    tail = max(1, k // 10)
    ordered = np.sort(accuracy)
    var = float(np.quantile(loss, 0.9))
    return {
        "pooled_mean": float(correct.sum() / examples.sum()),
        "mean": float(accuracy.mean()),
        "worst_10": float(ordered[:tail].mean()),
        "best_10": float(ordered[-tail:].mean()),
        "std": float(accuracy.std()),
        "variance_1e4": float(accuracy.var() * 1e4),
        "jain": float(accuracy.sum() ** 2 / (k * (accuracy**2).sum())),
        "min": float(ordered[0]),
        "max": float(ordered[-1]),
        "K": k,
        "var": var,
        "cvar": float(loss[loss >= var].mean()),
        "evar": float("nan"),  # stored as null: must come back as JSON null
        "tivar": float((var + loss.max()) / 2),
        "alpha": 0.1,
    }


def build_store(path: Path, *, devices: int = 10, rounds: int = 3, runs=RUNS) -> dict[str, dict[str, Any]]:
    """Fill a results store at ``path`` through the ResultsStore API; returns what was written per run.

    Device k has a fixed difficulty; a strategy's SPREAD says how far behind
    the hard devices stay. Half the devices are sampled per round, so the
    tilted weights of the others are missing. q-FFL records no tilted weights.
    """
    difficulty = np.random.default_rng(0).permutation(np.linspace(0.02, 0.5, devices))
    examples = 20 + 7 * np.arange(devices)
    written: dict[str, dict[str, Any]] = {}
    with ResultsStore(path) as store:
        for run_id, strategy, params, seed, name, recorded, planned, finish in runs:
            planned = planned or rounds
            recorded = recorded or rounds
            rng = np.random.default_rng([seed, len(strategy)])
            store.create_run(
                run_id=run_id, name=name, scenario=SCENARIO, engine="inprocess", strategy=strategy,
                strategy_params=params, seed=seed, config_hash=f"hash-{strategy}-{params.get('t', params.get('q', 0))}",
                config={"name": SCENARIO, "strategy": {"name": strategy, **params}, "note": XSS},
                data={"name": "synthetic", "path": None, "sha256": None}, rounds_planned=planned,
            )  # fmt: skip
            final = 0.95 - 0.02 * (strategy == "term") - SPREAD[strategy] * difficulty
            info: dict[str, Any] = {"strategy": strategy, "seed": seed, "rounds": {}, "weights": {}}
            for r in range(1, recorded + 1):
                progress = 1 - math.exp(-3 * r / planned)
                eval_rows, stats, accs = [], {}, {}
                for split, noise in (("test", 0.03), ("val", 0.05)):
                    acc_true = np.clip(0.5 + (final - 0.5) * progress + rng.normal(0, noise, devices), 0, 1)
                    correct = np.round(acc_true * examples).astype(int)
                    accuracy = correct / examples
                    loss = -np.log(np.maximum(accuracy, 0.01))
                    stats[split] = naive_stats(accuracy, correct, examples, loss)
                    accs[split] = accuracy
                    eval_rows += [
                        {"partition_id": k, "split": split, "loss": float(loss[k]), "accuracy": float(accuracy[k]),
                         "correct": int(correct[k]), "examples": int(examples[k])}
                        for k in range(devices)
                    ]  # fmt: skip
                sampled = np.sort(rng.choice(devices, size=devices // 2, replace=False))
                train_loss = -np.log(np.maximum(accs["val"][sampled], 0.01))
                if strategy == "qffl":
                    weights = [None] * len(sampled)
                else:
                    logits = np.log(examples[sampled]) + params.get("t", 0.0) * train_loss
                    weights = list(np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum())
                train_rows = [
                    {"partition_id": int(k), "train_loss": float(f), "tilted_weight": w,
                     "num_examples": int(examples[k])}
                    for k, f, w in zip(sampled, train_loss, weights, strict=True)
                ]  # fmt: skip
                store.record_round(run_id, r, train_rows=train_rows, eval_rows=eval_rows, stats=stats, duration_s=0.1)
                info["rounds"][r] = {"stats": stats, "accuracy": accs}
                info["weights"][r] = dict(zip(sampled.tolist(), weights, strict=True))
            info["final"] = info["rounds"][recorded]
            if finish:
                store.finish_run(run_id, "finished", summary={"run_id": run_id, "test": info["final"]["stats"]["test"]})
            written[run_id] = info
    return written


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> tuple[Path, dict[str, dict[str, Any]]]:
    path = tmp_path_factory.mktemp("dashboard") / "results.db"
    return path, build_store(path)


@pytest.fixture(scope="module")
def client(store):
    with TestClient(create_app(store[0])) as c:
        yield c


def file_state(path: Path) -> tuple[str, int]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns


# -- runs list ------------------------------------------------------------------


def test_runs_json_lists_every_run_newest_first_with_final_test_stats(client, store):
    runs = client.get("/api/runs").json()
    assert [r["run_id"] for r in runs] == [r[0] for r in reversed(RUNS)]
    by_id = {r["run_id"]: r for r in runs}
    for run_id, info in store[1].items():
        row = by_id[run_id]
        expected = info["final"]["stats"]["test"]
        for stat in ("pooled_mean", "worst_10", "std"):
            assert row["final"]["test"][stat] == pytest.approx(expected[stat], abs=1e-12)
    assert by_id["term-3"]["status"] == "running"
    assert (by_id["term-3"]["rounds_completed"], by_id["term-3"]["rounds_planned"]) == (2, 4)
    assert by_id["qffl-1"]["params"] == {"q": 1.0, "tau": 0.0}
    assert by_id["term-1"]["params"]["t"] == 1.0


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("strategy=term", {"term-1", "term-2", "term-3"}),
        ("status=running", {"term-3"}),
        ("status=finished&strategy=fedavg", {"fedavg-1", "fedavg-2"}),
        (f"scenario={SCENARIO}", {r[0] for r in RUNS}),
        ("scenario=nothing-here", set()),
    ],
)
def test_runs_json_filters(client, query, expected):
    response = client.get(f"/api/runs?{query}")
    assert response.status_code == 200
    assert {r["run_id"] for r in response.json()} == expected


def test_runs_json_rejects_an_unknown_status(client):
    assert client.get("/api/runs?status=sleeping").status_code == 422


def test_runs_page_lists_runs_with_filter_options_and_sortable_columns(client):
    response = client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    html = response.text
    for run_id, *_ in RUNS:
        assert f'data-run-id="{run_id}"' in html
    for strategy in ("fedavg", "qffl", "term"):
        assert f'<option value="{strategy}">{strategy}</option>' in html
    assert '<option value="running">running</option>' in html
    assert 'id="filter-text"' in html and 'class="runs sortable"' in html
    assert "2/4" in html  # rounds completed / planned of the running run


# -- one run --------------------------------------------------------------------


def test_run_json_has_settings_progress_and_rounds(client, store):
    run = client.get("/api/runs/term-1").json()
    assert run["strategy"] == "term" and run["seed"] == 1 and run["status"] == "finished"
    assert run["strategy_params"] == {"t": 1.0, "lam": 1.0, "tau": 0.0}
    assert [r["round"] for r in run["rounds"]] == [1, 2, 3]
    assert all(r["num_sampled"] == 5 for r in run["rounds"])
    assert run["summary"]["run_id"] == "term-1"


def test_rounds_json_has_every_statistic_per_split_and_nan_as_null(client, store):
    response = client.get("/api/runs/fedavg-1/rounds")
    assert "NaN" not in response.text
    splits = response.json()["splits"]
    written = store[1]["fedavg-1"]["rounds"]
    for split in ("test", "val"):
        columns = splits[split]
        assert columns["round"] == [1, 2, 3]
        for stat in ("pooled_mean", "mean", "worst_10", "best_10", "std", "jain", "var", "cvar", "tivar"):
            assert columns[stat] == pytest.approx([written[r]["stats"][split][stat] for r in (1, 2, 3)])
        assert columns["evar"] == [None, None, None]


def test_devices_at_a_round_are_named_and_match_what_was_written(client, store):
    data = client.get("/api/runs/term-2/devices?round=2&split=val").json()
    assert (data["round"], data["split"], data["rounds"]) == (2, "val", [1, 2, 3])
    assert [d["name"] for d in data["devices"]] == [f"device {k}" for k in range(10)]
    assert [d["accuracy"] for d in data["devices"]] == pytest.approx(store[1]["term-2"]["rounds"][2]["accuracy"]["val"])


def test_devices_default_to_the_last_round_and_unknown_rounds_are_404(client):
    assert client.get("/api/runs/term-3/devices").json()["round"] == 2
    missing = client.get("/api/runs/term-3/devices?round=9")
    assert missing.status_code == 404
    assert "round 9" in missing.json()["detail"] and "evaluated rounds: 1, 2" in missing.json()["detail"]
    assert client.get("/api/runs/term-3/devices?split=train").status_code == 422


def test_a_run_evaluated_every_few_rounds_shows_its_evaluated_rounds_and_all_its_training(tmp_path):
    from conftest import small_scenario
    from term_fl.results import ResultsStore
    from term_fl.runs.run import run_one

    db = tmp_path / "results.db"
    with ResultsStore(db) as writable:
        run_id = run_one(small_scenario("run.engine=inprocess", "run.rounds=5", "run.evaluate_every=2"), writable,
                         out_dir=tmp_path / "run").run_id
    with TestClient(create_app(db)) as client:
        assert client.get(f"/api/runs/{run_id}/rounds").json()["splits"]["test"]["round"] == [2, 4, 5]
        devices = client.get(f"/api/runs/{run_id}/devices").json()
        assert devices["round"] == 5 and devices["rounds"] == [2, 4, 5]
        missing = client.get(f"/api/runs/{run_id}/devices?round=3")
        assert missing.status_code == 404 and "evaluated rounds: 2, 4, 5" in missing.json()["detail"]
        assert client.get(f"/api/runs/{run_id}/weights").json()["rounds"] == [1, 2, 3, 4, 5]
        assert client.get(f"/runs/{run_id}").status_code == 200
        compare = client.get(f"/api/compare?run={run_id}").json()
        assert compare["cells"][0]["n"] == 1


def test_weights_matrix_has_nulls_where_a_device_was_not_sampled(client, store):
    data = client.get("/api/runs/term-1/weights").json()
    assert "NaN" not in json.dumps(data)
    assert data["rounds"] == [1, 2, 3]
    written = store[1]["term-1"]["weights"]
    for i, pid in enumerate(data["partition_ids"]):
        assert data["devices"][i] == f"device {pid}"
        for j, r in enumerate(data["rounds"]):
            if pid in written[r]:
                assert data["weights"][i][j] == pytest.approx(written[r][pid])
            else:
                assert data["weights"][i][j] is None
    assert sum(w is None for row in data["weights"] for w in row) > 0


def test_qffl_weights_are_all_null(client):
    data = client.get("/api/runs/qffl-1/weights").json()
    assert all(w is None for row in data["weights"] for w in row)


def test_run_page_shows_the_run_and_the_chart_slots(client):
    html = client.get("/runs/term-1").text
    assert "term t=1 seed 1" in html and 'data-run-id="term-1"' in html
    for chart in (*GROUPS, "histogram", "devices", "weights"):  # a chart per group of statistics
        assert f'id="chart-{chart}"' in html
    assert 'id="round"' in html  # the round slider


# -- comparison -----------------------------------------------------------------


def expected_cells(store, run_ids):
    """Mean and standard error (statistics.stdev / sqrt(n)) of the final test statistics, per strategy."""
    cells: dict[str, list] = {}
    for run_id in run_ids:
        info = store[1][run_id]
        cells.setdefault(info["strategy"], []).append(info["final"]["stats"]["test"])
    out = {}
    for strategy, finals in cells.items():
        out[strategy] = {}
        for stat in ("pooled_mean", "worst_10", "best_10", "std"):
            values = [f[stat] for f in finals]
            se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None
            out[strategy][stat] = (statistics.fmean(values), se, len(values))
    return out


def check_cells(cells, expected):
    assert {c["strategy"] for c in cells} == set(expected)
    for cell in cells:
        for stat, (mean, se, n) in expected[cell["strategy"]].items():
            got = cell["stats"]["test"][stat]
            assert got["mean"] == pytest.approx(mean, abs=1e-12)
            assert got["n"] == n == cell["n"]
            assert got["se"] is None if se is None else got["se"] == pytest.approx(se, abs=1e-12)


def test_compare_by_scenario_groups_finished_runs_by_config_hash(client, store):
    data = client.get(f"/api/compare?scenario={SCENARIO}").json()
    finished = [r[0] for r in RUNS if r[-1]]
    assert sorted(r["run_id"] for r in data["runs"]) == sorted(finished)
    assert [c["label"] for c in data["cells"]] == ["fedavg", "qffl q=1", "term t=1"]
    check_cells(data["cells"], expected_cells(store, finished))
    term = data["cells"][2]
    assert term["seeds"] == [1, 2]
    pooled = np.sort(np.concatenate([store[1][r]["final"]["accuracy"]["test"] for r in term["run_ids"]]))
    assert term["ecdf"]["test"]["x"] == pytest.approx(pooled.tolist())
    assert term["ecdf"]["test"]["y"] == pytest.approx((np.arange(1, pooled.size + 1) / pooled.size).tolist())


def test_compare_by_run_ids_includes_a_running_run(client, store):
    ids = ["term-1", "term-2", "term-3", "fedavg-1"]
    data = client.get("/api/compare?runs=" + ",".join(ids)).json()
    check_cells(data["cells"], expected_cells(store, ids))
    assert next(c for c in data["cells"] if c["strategy"] == "term")["running"] == 1


def test_compare_errors(client):
    assert client.get("/api/compare").status_code == 400
    unknown = client.get("/api/compare?runs=term-1,nope")
    assert unknown.status_code == 404 and "'nope'" in unknown.json()["detail"]
    none = client.get("/api/compare?scenario=nothing-here")
    assert none.status_code == 404 and "nothing-here" in none.json()["detail"]
    assert client.get("/compare").status_code == 400
    assert "nothing-here" in client.get("/compare?scenario=nothing-here").text


def test_compare_page(client):
    html = client.get(f"/compare?scenario={SCENARIO}").text
    for chart in ("chart-tradeoff-0", "chart-tradeoff-1", "chart-ecdf", "curves", "sweeps"):
        assert f'id="{chart}"' in html
    assert 'id="cells"' in html and "/api/compare.csv?scenario=vehicle&amp;table=cells" in html
    assert f'data-scenario="{SCENARIO}"' in html
    assert 'href="/runs/term-2"' in html


# -- API documentation, assets ----------------------------------------------------


def test_openapi_documents_every_endpoint_and_no_cdn_docs_page(client):
    schema = client.get("/openapi.json").json()
    paths = schema["paths"]
    for path in ("/api/runs", "/api/runs.csv", "/api/runs/{run_id}", "/api/runs/{run_id}/rounds",
                 "/api/runs/{run_id}/rounds.csv", "/api/runs/{run_id}/devices", "/api/runs/{run_id}/devices.csv",
                 "/api/runs/{run_id}/devices/{partition_id}", "/api/runs/{run_id}/weights", "/api/compare",
                 "/api/compare.csv"):  # fmt: skip
        assert "get" in paths[path], path
        assert "503" in paths[path]["get"]["responses"]
    params = {p["name"] for p in paths["/api/runs"]["get"]["parameters"]}
    assert params == {"scenario", "status", "strategy", "q", "limit", "offset"}
    assert not any(p.startswith("/runs") or p == "/" for p in paths)  # pages stay out of the API schema
    assert client.get("/docs").status_code == 404


def test_plotly_is_served_locally_and_pages_load_no_remote_script(client):
    response = client.get("/vendor/plotly.min.js")
    assert response.status_code == 200 and "javascript" in response.headers["content-type"]
    assert b"plotly.js" in response.content[:200]
    for url in ("/", "/runs/term-1", f"/compare?scenario={SCENARIO}"):
        html = client.get(url).text
        sources = re.findall(r'<script[^>]*\bsrc="([^"]*)"', html)
        assert sources and all(s.startswith("/") for s in sources), sources
        assert "http://" not in html and "https://" not in html
    assert client.get("/static/common.js").status_code == 200


# -- errors ---------------------------------------------------------------------


def test_unknown_run_is_404_as_json_and_as_page(client):
    for url in ("/api/runs/nope", "/api/runs/nope/rounds", "/api/runs/nope/devices", "/api/runs/nope/weights"):
        response = client.get(url)
        assert response.status_code == 404, url
        assert "'nope'" in response.json()["detail"]
    page = client.get("/runs/nope")
    assert page.status_code == 404 and page.headers["content-type"].startswith("text/html")
    assert "Run not found" in page.text and "nope" in page.text and "Traceback" not in page.text


def test_missing_database_is_a_clear_503(tmp_path):
    db = tmp_path / "no" / "results.db"
    with TestClient(create_app(db)) as client:
        api = client.get("/api/runs")
        assert api.status_code == 503
        assert str(db) in api.json()["detail"] and "does not exist" in api.json()["detail"]
        page = client.get("/")
        assert page.status_code == 503 and page.headers["content-type"].startswith("text/html")
        assert "Results database unavailable" in page.text and str(db) in page.text
        assert "Traceback" not in page.text
    assert not db.exists() and not db.parent.exists()  # nothing created


@pytest.mark.parametrize("content", [b"this is not a database" * 100, b""], ids=["garbage", "empty"])
def test_corrupt_database_is_a_clear_503(tmp_path, content):
    db = tmp_path / "results.db"
    db.write_bytes(content)
    with TestClient(create_app(db)) as client:
        for url in ("/api/runs", "/api/runs/x", f"/api/compare?scenario={SCENARIO}"):
            response = client.get(url)
            assert response.status_code == 503, url
            assert str(db) in response.json()["detail"]
        page = client.get("/runs/x")
        assert page.status_code == 503 and str(db) in page.text and "Traceback" not in page.text
    assert db.read_bytes() == content


def test_the_dashboard_never_modifies_the_database(store):
    path = store[0]
    before = file_state(path)
    with TestClient(create_app(path)) as client:
        for url in ("/", "/api/runs", "/runs/term-3", "/api/runs/term-3", "/api/runs/term-3/rounds",
                    "/api/runs/term-3/devices?round=1", "/api/runs/term-3/weights",
                    f"/compare?scenario={SCENARIO}", "/api/compare?runs=term-1,term-3", "/api/runs/nope"):  # fmt: skip
            assert client.get(url).status_code in (200, 404)
    assert file_state(path) == before


def test_a_round_recorded_while_the_dashboard_runs_shows_up(tmp_path):
    path = tmp_path / "results.db"
    build_store(path, runs=[RUNS[-1]])
    with TestClient(create_app(path)) as client:
        assert client.get("/api/runs/term-3").json()["rounds_completed"] == 2
        with ResultsStore(path) as writer:
            writer.record_round("term-3", 3)
        assert client.get("/api/runs/term-3").json()["rounds_completed"] == 3
        assert 'data-status="running"' in client.get("/runs/term-3").text


def test_a_failed_run_shows_its_error_escaped(tmp_path):
    path = tmp_path / "results.db"
    build_store(path, runs=[RUNS[-1]])
    with ResultsStore(path) as writer:
        writer.finish_run("term-3", "failed", error="ValueError: <b>boom</b>")
    with TestClient(create_app(path)) as client:
        html = client.get("/runs/term-3").text
    assert "ValueError: &lt;b&gt;boom&lt;/b&gt;" in html and "<b>boom</b>" not in html


def _serve_and_get(db: Path, path: str, *, access_log: bool) -> str:
    """Start ``serve`` in a child process, GET ``path`` once, stop it; the child's log."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = f"from term_fl.dashboard import serve; serve({str(db)!r}, port={port}, access_log={access_log})"
    server = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
                    assert len(json.load(response)) == len(RUNS)
                    break
            except OSError:
                assert server.poll() is None, "the dashboard exited"
                assert time.monotonic() < deadline, "the dashboard did not answer within 30 s"
                time.sleep(0.2)
    finally:
        server.terminate()
        log, _ = server.communicate(timeout=15)
    return log


def test_serve_answers_on_loopback_quietly_without_an_access_log(tmp_path, store):
    """uvicorn's INFO lines (started, running on ...) are not printed: `term-fl dashboard` prints the address
    itself; with the access log on they are (the next test: the output is captured)."""
    log = _serve_and_get(store[0], "/api/runs", access_log=False)
    assert "INFO" not in log and "Uvicorn running" not in log
    assert "GET /api/runs" not in log


def test_access_log_on_request_logs_each_request(tmp_path, store):
    log = _serve_and_get(store[0], "/api/runs", access_log=True)
    assert '"GET /api/runs HTTP/1.1" 200' in log


# -- escaping -------------------------------------------------------------------


def test_a_hostile_run_name_is_shown_as_text(client):
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    for url in ("/", "/runs/term-3", "/compare?runs=term-3,term-1"):
        html = client.get(url).text
        assert XSS not in html, url
        assert escaped in html, url
    assert client.get("/api/runs/term-3").json()["name"] == XSS  # JSON carries the text as it is


def test_page_scripts_insert_text_never_html():
    for script in STATIC_DIR.glob("*.js"):
        source = script.read_text()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
            assert sink not in source, f"{script.name} uses {sink}"
        assert "textContent" in source or script.name != "common.js"


def test_script_json_cannot_end_its_script_element():
    value = {"name": "</script><script>alert(1)</script><!--", "x": float("nan"), "y": [float("inf")]}
    text = script_json(value)
    assert "<" not in text and ">" not in text
    assert json.loads(text) == {"name": value["name"], "x": None, "y": [None]}


def test_inlined_scripts_cannot_end_their_script_element():
    source = inline_script("const a = '</script>', b = /<\\/SCRIPT/i; // <!-- x")
    assert not re.search(r"</script|<!--", source, re.I)


# -- static report --------------------------------------------------------------


def report_data(html: str) -> dict:
    blocks = re.findall(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S)
    assert len(blocks) == 1
    return json.loads(blocks[0])


def assert_self_contained(html: str) -> None:
    """Nothing to load: no script or stylesheet by address, no http(s) link in the markup
    (the inlined plotly.js mentions URLs in its code, for chart types we do not draw)."""
    assert not re.search(r"<script[^>]*\bsrc=", html), "a script is loaded from elsewhere"
    assert not re.search(r"<link[^>]*\bhref=\"(?!data:)", html), "a stylesheet is loaded from elsewhere"
    markup = re.sub(r"<script\b[^>]*>.*?</script>", "<script></script>", html, flags=re.S)
    assert "http://" not in markup and "https://" not in markup
    style = re.search(r"<style>(.*?)</style>", html, re.S).group(1)
    assert (STATIC_DIR / "dashboard.css").read_text() == style  # inlined as it is, not HTML-escaped
    assert "plotly.js v" in html  # plotly inlined
    assert "Plotly.react" in html  # page scripts inlined


def test_run_report_is_one_self_contained_file_with_the_run_data(tmp_path, store, client):
    before = file_state(store[0])
    out = write_report(store[0], "term-3", tmp_path / "out" / "report.html")
    assert file_state(store[0]) == before
    html = out.read_text()
    assert_self_contained(html)
    assert XSS not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    data = report_data(html)
    assert data["rounds"] == client.get("/api/runs/term-3/rounds").json()
    assert data["weights"] == client.get("/api/runs/term-3/weights").json()
    assert data["run"]["name"] == XSS
    assert data["devices"]["test"]["by_round"]["2"] == client.get("/api/runs/term-3/devices?round=2").json()["devices"]
    assert data["devices"]["val"]["rounds"] == [1, 2]


def test_scenario_report_compares_its_finished_runs(tmp_path, store, client):
    out = write_report(store[0], SCENARIO, tmp_path / "scenario.html")
    html = out.read_text()
    assert_self_contained(html)
    data = report_data(html)["compare"]
    assert data == client.get(f"/api/compare?scenario={SCENARIO}").json()
    check_cells(data["cells"], expected_cells(store, [r[0] for r in RUNS if r[-1]]))


def test_report_of_nothing_says_what_exists(tmp_path, store):
    with pytest.raises(
        ReportError, match=r"'nope' is neither a run id nor a scenario .*scenarios with finished runs: vehicle"
    ):
        write_report(store[0], "nope", tmp_path / "r.html")
    assert not (tmp_path / "r.html").exists()
    with pytest.raises(StoreError, match="does not exist"):
        write_report(tmp_path / "missing.db", "term-1", tmp_path / "r.html")


def test_report_of_a_scenario_without_finished_runs(tmp_path):
    path = tmp_path / "results.db"
    build_store(path, runs=[RUNS[-1]])
    with pytest.raises(ReportError, match="has no finished run"):
        write_report(path, SCENARIO, tmp_path / "r.html")
