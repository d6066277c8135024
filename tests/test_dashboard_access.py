"""The dashboard's access token (term_fl.dashboard.access): asked for once the dashboard can be reached from other hosts.

With FastAPI's test client on a store these tests fill themselves, and, for
the way a browser carries the token (the prompt page, ``?token=`` once, then
the cookie for the pages and the API calls their scripts make), in headless
Chromium when it is installed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from test_dashboard import RUNS, XSS, build_store

from term_fl.dashboard import create_app
from term_fl.dashboard.access import COOKIE, TOKEN_ENV, check_token, new_token, token_for

TOKEN = "s3cret-token_for.tests~0123456789"


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("access") / "results.db"
    build_store(path)
    return path


@pytest.fixture
def client(db):
    with TestClient(create_app(db, allowed_hosts={"testserver"}, token=TOKEN)) as c:
        yield c


def test_loopback_needs_no_token_and_other_addresses_get_a_new_one():
    assert token_for("127.0.0.1", None) is None and token_for("localhost", None) is None
    made = {token_for("0.0.0.0", None), token_for("10.1.2.3", None), token_for("::", None)}
    assert len(made) == 3 and all(t and len(t) == 32 for t in made)
    assert token_for("127.0.0.1", TOKEN) == TOKEN, "a given token is asked for on loopback too (a proxy may publish it)"


@pytest.mark.parametrize("bad", ["short", "has space" * 3, "semi;colon-1234567890", "quote\"1234567890123", "ä" * 20])
def test_a_given_token_must_be_safe_in_a_url_a_cookie_and_a_header(bad):
    with pytest.raises(ValueError, match=TOKEN_ENV):
        check_token(bad)
    assert check_token(new_token())


def test_without_the_token_the_api_answers_401_json_and_pages_ask_for_it(client):
    api = client.get("/api/runs")
    assert api.status_code == 401 and api.headers["www-authenticate"].startswith("Bearer")
    assert "Authorization: Bearer" in api.json()["detail"]
    page = client.get("/runs/term-1")
    assert page.status_code == 401 and 'name="token"' in page.text and 'action="/runs/term-1"' in page.text
    assert TOKEN not in page.text and TOKEN not in api.text
    for path in ("/static/dashboard.css", "/vendor/plotly.min.js", "/openapi.json", "/compare?scenario=vehicle"):
        assert client.get(path).status_code == 401, path


def test_the_token_in_the_address_once_sets_a_cookie_and_leaves_the_address(client):
    answer = client.get(f"/compare?scenario=vehicle&token={TOKEN}&run=a%2Fb", follow_redirects=False)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/compare?scenario=vehicle&run=a%2Fb"
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}={TOKEN};") and "HttpOnly" in cookie and "SameSite=lax" in cookie
    assert "Path=/" in cookie
    assert client.get("/api/runs").status_code == 200, "the cookie opens the API for the page's scripts"
    assert client.get("/").status_code == 200


def test_a_bearer_header_opens_the_api_for_scripts(db):
    with TestClient(create_app(db, token=TOKEN)) as c:
        assert c.get("/api/runs", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert c.get("/api/runs", headers={"Authorization": f"bearer {TOKEN}"}).status_code == 200
        for wrong in (f"Bearer {TOKEN}x", f"Basic {TOKEN}", TOKEN, "Bearer "):
            assert c.get("/api/runs", headers={"Authorization": wrong}).status_code == 401, wrong
        assert c.get("/api/runs", headers={"Cookie": f"{COOKIE}=nope"}).status_code == 401


def test_a_wrong_token_is_said_to_be_wrong_and_sets_nothing(client):
    answer = client.get("/?token=not-the-right-token-at-all", follow_redirects=False)
    assert answer.status_code == 401 and "Wrong token" in answer.text and "set-cookie" not in answer.headers


def test_the_prompt_page_shows_the_address_values_as_text(client):
    page = client.get(f"/?q={XSS}&scenario=a%22b")
    assert page.status_code == 401 and XSS not in page.text
    assert "&lt;script&gt;" in page.text and 'value="a&quot;b"' in page.text


def test_the_host_check_comes_first(db):
    with TestClient(create_app(db, allowed_hosts={"testserver"}, token=TOKEN)) as c:
        refused = c.get(f"/api/runs?token={TOKEN}", headers={"Host": "rebind.example"}, follow_redirects=False)
        assert refused.status_code == 400 and "set-cookie" not in refused.headers


def test_no_token_asked_when_none_is_set(db):
    with TestClient(create_app(db)) as c:
        assert c.get("/api/runs").status_code == 200
        assert len(c.get("/api/runs").json()) == len(RUNS)


def test_the_cli_takes_a_given_token_from_the_environment(tmp_path, capsys, monkeypatch):
    from term_fl.cli.commands import main

    seen = {}
    monkeypatch.setattr("term_fl.dashboard.serve", lambda db, **kw: seen.update(kw))
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    (tmp_path / "r.db").touch()
    assert main(["dashboard", "--db", str(tmp_path / "r.db"), "--host", "0.0.0.0"]) == 0
    out = capsys.readouterr().out
    assert seen["token"] == TOKEN and TOKEN not in out and f"token from ${TOKEN_ENV}" in out
    monkeypatch.setenv(TOKEN_ENV, "too short")
    assert main(["dashboard", "--db", str(tmp_path / "r.db"), "--host", "0.0.0.0"]) == 2
    assert TOKEN_ENV in capsys.readouterr().err


# --------------------------------------------------------------------------
# In a real browser
# --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.browser
def test_a_browser_enters_the_token_once_and_every_page_works(db, tmp_path):
    browser_test = pytest.importorskip("test_dashboard_browser", reason="needs chromium, chromedriver and selenium")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    app = create_app(db, allowed_hosts={"127.0.0.1"}, token=TOKEN)
    options = browser_test.Options()
    options.binary_location = str(browser_test.CHROMIUM)
    for flag in (*browser_test.FLAGS, f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = browser_test.webdriver.Chrome(service=browser_test.Service(str(browser_test.CHROMEDRIVER)),
                                           options=options)
    try:
        with browser_test.ServerThread(app) as server:
            driver.get(f"{server.url}/runs/term-1")
            field = WebDriverWait(driver, 20).until(lambda d: d.find_element(By.ID, "token"))
            field.send_keys(TOKEN + "\n")  # the form sends ?token= once
            WebDriverWait(driver, 30).until(lambda d: d.current_url == f"{server.url}/runs/term-1")
            browser_test.wait_for_charts(driver, ["chart-accuracy", "chart-devices"])  # drawn from API calls
            driver.get(f"{server.url}/")
            WebDriverWait(driver, 20).until(lambda d: d.find_element(By.ID, "row-count").text.endswith(f"of {len(RUNS)}"))
            errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE" and "401" not in e["message"]]
            assert not errors, errors
    finally:
        driver.quit()
