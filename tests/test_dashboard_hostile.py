"""The dashboard under hostile or unusual input: Host headers, odd run ids, a damaged row, a public bind."""

from __future__ import annotations

import sqlite3

import pytest
from fastapi.testclient import TestClient

from term_fl.cli.commands import main
from term_fl.dashboard import create_app
from term_fl.dashboard.hosts import allowed_host_names, host_of
from term_fl.results import ResultsStore

from test_dashboard import build_store

ODD_IDS = ["sweep/cell-a/seed-1", "a,b", "plain"]


@pytest.fixture(scope="module")
def odd_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("odd") / "results.db"
    runs = [(run_id, "term", {"t": 1.0, "lam": 1.0, "tau": 0.0}, seed, f"run {run_id}", None, None, True)
            for seed, run_id in enumerate(ODD_IDS)]
    build_store(path, runs=runs)
    return path


@pytest.mark.parametrize("run_id", ODD_IDS)
def test_run_ids_with_a_slash_or_a_comma_are_reachable(odd_store, run_id):
    from urllib.parse import quote

    with TestClient(create_app(odd_store)) as client:
        for encoded in (quote(run_id, safe=""), quote(run_id)):  # as the pages' scripts and links write them
            assert client.get(f"/api/runs/{encoded}").json()["run_id"] == run_id
            assert client.get(f"/api/runs/{encoded}/rounds").status_code == 200
            assert client.get(f"/api/runs/{encoded}/weights").status_code == 200
            assert client.get(f"/api/runs/{encoded}/devices").json()["rounds"] == [1, 2, 3]
            page = client.get(f"/runs/{encoded}")
            assert page.status_code == 200 and f"run {run_id}" in page.text
        runs_page = client.get("/").text
        assert f'href="/runs/{quote(run_id, safe="")}"' in runs_page


def test_compare_takes_run_ids_holding_commas_as_repeated_parameters(odd_store):
    with TestClient(create_app(odd_store)) as client:
        data = client.get("/api/compare", params=[("run", "a,b"), ("run", "sweep/cell-a/seed-1")]).json()
        assert sorted(r["run_id"] for r in data["runs"]) == ["a,b", "sweep/cell-a/seed-1"]
        page = client.get("/compare", params=[("run", "a,b"), ("run", "plain")])
        assert page.status_code == 200 and "data-run-ids='[\"a,b\", \"plain\"]'" in page.text
        # the comma-separated form still works for plain ids
        assert len(client.get("/api/compare?runs=plain").json()["runs"]) == 1


def test_one_row_with_damaged_json_is_flagged_and_the_others_still_listed(tmp_path):
    path = tmp_path / "results.db"
    runs = [(run_id, "fedavg", {"tau": 0.0}, seed, f"run {run_id}", None, None, True)
            for seed, run_id in enumerate(["good-1", "broken", "good-2"])]
    build_store(path, runs=runs)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE runs SET config_json = '{not json', summary_json = '[' WHERE run_id = 'broken'")
        conn.execute("UPDATE round_stats SET stats_json = 'oops' WHERE run_id = 'good-2' AND round = 3")
    with TestClient(create_app(path)) as client:
        listed = client.get("/api/runs")
        assert listed.status_code == 200
        by_id = {r["run_id"]: r for r in listed.json()}
        assert set(by_id) == {"good-1", "broken", "good-2"}
        assert by_id["broken"]["damaged"] == ["config_json", "summary_json"]
        assert by_id["good-2"]["damaged"] == ["stats_json"]
        assert by_id["good-1"]["damaged"] == [] and by_id["good-1"]["final"]["test"]["pooled_mean"] is not None
        page = client.get("/")
        assert page.status_code == 200 and page.text.count('class="badge damaged"') == 2
        assert client.get("/runs/broken").status_code == 200
        assert client.get("/api/runs/broken").json()["config"] == {}


def test_the_store_reads_a_damaged_row_as_empty_and_names_the_columns(tmp_path):
    path = tmp_path / "results.db"
    build_store(path, runs=[("r", "fedavg", {"tau": 0.0}, 0, "r", None, None, True)])
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE runs SET data_json = 'x' WHERE run_id = 'r'")
    with ResultsStore.open_readonly(path) as store:
        info = store.get_run("r")
    assert info.damaged == ("data_json",) and info.data == {}


HOST_CASES = [
    # (bound host, extra names, Host header, answered?)
    ("127.0.0.1", [], "127.0.0.1:8050", True),
    ("127.0.0.1", [], "localhost:8050", True),
    ("127.0.0.1", [], "[::1]:8050", True),
    ("127.0.0.1", [], "attacker.example:8050", False),  # DNS rebinding
    ("127.0.0.1", [], "10.0.0.5:8050", False),
    ("127.0.0.1", ["dash.lab"], "dash.lab:8050", True),
    ("127.0.0.1", ["dash.lab"], "DASH.LAB.:8050", True),
    ("0.0.0.0", [], "10.0.0.5:8050", True),  # an IP literal cannot be rebound
    ("0.0.0.0", [], "attacker.example", False),
    ("0.0.0.0", ["term-fl.example"], "term-fl.example", True),
    ("127.0.0.1", [], "", False),
    # compose passes the names it is published under as one comma-separated value, maybe empty
    ("0.0.0.0", ["dashboard", "a.example, B.example"], "b.example:8050", True),
    ("0.0.0.0", ["dashboard", ""], "dashboard:8050", True),
    ("0.0.0.0", ["dashboard", ""], "a.example", False),
    # a strict parse: exactly one host and an optional port (issue 22)
    ("127.0.0.1", [], "127.0.0.1:8050@evil.example", False),
    ("127.0.0.1", [], "localhost:8050, evil.example", False),
    ("127.0.0.1", [], "localhost:8050/evil.example", False),
    ("127.0.0.1", [], "[::1", False),
    ("0.0.0.0", [], "10.0.0.5:8050:80", False),
    ("0.0.0.0", [], "[::1]:8050", True),
]


@pytest.mark.parametrize(("bound", "extra", "header", "answered"), HOST_CASES)
def test_only_the_bound_and_allowed_host_names_are_answered(odd_store, bound, extra, header, answered):
    names, any_ip = allowed_host_names(bound, extra)
    with TestClient(create_app(odd_store, allowed_hosts=names, any_ip_host=any_ip)) as client:
        response = client.get("/api/runs", headers={"Host": header})
    assert (response.status_code == 200) is answered
    if not answered:
        assert response.status_code == 400 and "--allowed-host" in response.text


def test_host_of_strips_the_port_and_refuses_what_is_not_one_host():
    assert [host_of(h) for h in ("a.b:80", "[::1]:8050", "X.org.", "1.2.3.4")] == ["a.b", "::1", "x.org", "1.2.3.4"]
    assert [host_of(h) for h in ("a@b", "a, b", "a b", "a:1:2", "[x]:80", "", "a/b")] == [None] * 7


HEADER_CASES = [
    # (what, path, status): pages, API, CSV, static files, errors, refusals
    ("runs page", "/", 200), ("run page", "/runs/plain", 200), ("API", "/api/runs", 200),
    ("CSV", "/api/runs.csv", 200), ("OpenAPI", "/openapi.json", 200), ("script", "/static/common.js", 200),
    ("plotly", "/vendor/plotly.min.js", 200), ("unknown run", "/api/runs/nope", 404),
    ("unknown page", "/nowhere", 404), ("invalid query", "/api/runs?limit=0", 422),
]


@pytest.mark.parametrize(("path", "status"), [c[1:] for c in HEADER_CASES], ids=[c[0] for c in HEADER_CASES])
def test_every_answer_carries_the_security_headers(odd_store, path, status):
    from term_fl.dashboard.headers import CONTENT_SECURITY_POLICY

    names, any_ip = allowed_host_names("127.0.0.1")
    with TestClient(create_app(odd_store, allowed_hosts=names, any_ip_host=any_ip)) as client:
        answered, refused = (client.get(path, headers={"Host": host}) for host in ("127.0.0.1:8050", "evil.example"))
        assert (answered.status_code, refused.status_code) == (status, 400)  # the Host guard's refusal too
        for response in (answered, refused):
            assert response.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
            assert response.headers["X-Content-Type-Options"] == "nosniff"


def test_the_policy_runs_no_inline_script_and_the_pages_have_none(odd_store):
    """script-src 'self': the pages' scripts are files; their data blocks are JSON, which a policy never runs."""
    import re

    from term_fl.dashboard.headers import CONTENT_SECURITY_POLICY

    assert "script-src 'self';" in CONTENT_SECURITY_POLICY and "unsafe" not in CONTENT_SECURITY_POLICY.split(
        "style-src")[0]
    with TestClient(create_app(odd_store)) as client:
        for path in ("/", "/runs/plain", "/compare?runs=plain"):
            page = client.get(path).text
            scripts = re.findall(r"<script([^>]*)>(.*?)</script>", page, re.S)
            assert all('src="/' in attrs or 'type="application/json"' in attrs for attrs, _ in scripts), path
            assert not re.search(r"\son[a-z]+=", page), f"an inline event handler in {path}"


@pytest.mark.parametrize(("path", "status"), [
    ("/api/runs/plain/devices/" + "9" * 25, 404),  # a 25-digit device id: beyond SQLite's integers
    ("/api/runs/plain/devices/-1", 404),
    ("/api/runs/plain/devices?round=" + "9" * 25, 404),
    ("/api/runs?offset=" + "9" * 25, 422),
    ("/?page=" + "9" * 25, 422),
], ids=["device-id-25-digits", "device-id-negative", "round-25-digits", "offset-25-digits", "page-25-digits"])
def test_numbers_beyond_the_stores_integers_are_not_found_not_a_server_error(odd_store, path, status):
    with TestClient(create_app(odd_store), raise_server_exceptions=False) as client:
        assert client.get(path).status_code == status


@pytest.mark.parametrize(("host", "asks"), [("0.0.0.0", True), ("192.168.1.10", True), ("127.0.0.1", False),
                                          ("localhost", False)])
def test_binding_beyond_loopback_asks_for_a_printed_token(tmp_path, capsys, monkeypatch, host, asks):
    seen = {}
    monkeypatch.delenv("TERM_FL_DASHBOARD_TOKEN", raising=False)
    monkeypatch.setattr("term_fl.dashboard.serve", lambda db, **kw: seen.update(kw))
    (tmp_path / "r.db").touch()
    assert main(["dashboard", "--db", str(tmp_path / "r.db"), "--host", host, "--allowed-host", "lab.example"]) == 0
    out = capsys.readouterr().out
    assert (seen["token"] is not None) is asks
    if asks:
        assert f"http://{host}:8050/?token={seen['token']}" in out and len(seen["token"]) >= 32
    else:
        assert "?token=" not in out and "no token: this machine only" in out
    assert seen["allowed_hosts"] == ["lab.example"] and seen["host"] == host
