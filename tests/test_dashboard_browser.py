"""The dashboard in a real browser: headless Debian Chromium driven by Selenium.

A uvicorn server runs the app in a background thread on a free loopback port
over a store of FedAvg, q-FFL and TERM runs; the test loads the pages, waits
for Plotly to draw, checks what a user sees, and fails on any SEVERE message
in the browser console. Screenshots go to artifacts/; the comparison is also copied to
docs/dashboard-comparison.png (the README's picture) when that file is
missing or TERM_FL_UPDATE_SCREENSHOTS=1.

Needs /usr/bin/chromium and /usr/bin/chromedriver
(``apt-get install -y chromium chromium-driver``) and selenium; skipped otherwise.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest
import uvicorn
from test_dashboard import RUNS, SCENARIO, XSS, build_store

from term_fl.dashboard import create_app, write_report
from term_fl.fairness import GROUPS
from term_fl.results import ResultsStore

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
    pytest.skip(
        f"needs {CHROMIUM} and {CHROMEDRIVER}: apt-get install -y chromium chromium-driver",
        allow_module_level=True,
    )
webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (pip install selenium)")
from selenium.common.exceptions import NoAlertPresentException  # noqa: E402
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts"
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--window-size=1400,1000",
)  # fmt: skip
RUN_CHARTS = (*GROUPS, "histogram", "devices", "weights")  # one chart per group of statistics, then the devices


class ServerThread:
    """uvicorn serving ``app`` on a free 127.0.0.1 port in a daemon thread."""

    def __init__(self, app) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the dashboard server did not start within 20 s")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)
        self.socket.close()


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("browser") / "results.db"
    build_store(path, devices=23, rounds=20)
    return path


@pytest.fixture(scope="module")
def server(db):
    with ServerThread(create_app(db)) as running:
        yield running


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    options = Options()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def page(browser):
    """The browser; after the test, no SEVERE console message may have been logged."""
    browser.get_log("browser")  # drop what earlier tests left
    yield browser
    severe = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert not severe, f"browser console errors: {severe}"


def wait_for_charts(driver, ids, timeout=30) -> None:
    """Until Plotly has drawn an SVG inside each chart div."""
    WebDriverWait(driver, timeout).until(
        lambda d: all(d.find_elements(By.CSS_SELECTOR, f"#{i} .plot-container .main-svg") for i in ids)
    )


def assert_no_alert(driver) -> None:
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert  # noqa: B018


def screenshot(driver, name: str) -> Path:
    """A full-page screenshot (at most 4000 px high) in artifacts/NAME.png."""
    ARTIFACTS.mkdir(exist_ok=True)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    metrics = {"width": 1400, "height": min(max(height, 800), 4000), "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    try:
        time.sleep(0.5)  # responsive charts redraw for the new size
        path = ARTIFACTS / f"{name}.png"
        assert driver.save_screenshot(str(path))
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    return path


def record_next_round(db: Path, run_id: str) -> str:
    """Record one more (empty) round of a running run, as the experiment would; returns 'done/planned'."""
    with ResultsStore(db) as writer:
        run = writer.get_run(run_id)
        writer.record_round(run_id, run.rounds_completed + 1)
        return f"{run.rounds_completed + 1}/{run.rounds_planned}"


def visible_rows(driver) -> list:
    return [row for row in driver.find_elements(By.CSS_SELECTOR, "#runs-table tbody tr") if row.is_displayed()]


def test_runs_page_filters_sorts_and_shows_names_as_text(page, server, db):
    page.get(server.url + "/")
    WebDriverWait(page, 20).until(
        lambda d: d.find_element(By.ID, "row-count").text == f"{len(RUNS)} of {len(RUNS)} runs"
    )
    assert page.find_element(By.CSS_SELECTOR, 'tr[data-run-id="term-3"] td.name a').text == XSS
    assert_no_alert(page)

    page.find_element(By.ID, "filter-text").send_keys("qffl")
    assert [r.get_attribute("data-run-id") for r in visible_rows(page)] == ["qffl-1"]
    page.find_element(By.ID, "filter-text").clear()
    page.execute_script("const s = document.getElementById('filter-status'); s.value = 'running';"
                        "s.dispatchEvent(new Event('change'));")  # fmt: skip
    assert [r.get_attribute("data-run-id") for r in visible_rows(page)] == ["term-3"]
    page.execute_script("const s = document.getElementById('filter-status'); s.value = '';"
                        "s.dispatchEvent(new Event('change'));")  # fmt: skip

    seed_header = page.find_element(By.XPATH, "//table[@id='runs-table']//th[normalize-space()='seed']")
    seed_column = seed_header.get_property("cellIndex")
    seed_header.click()  # descending first
    seeds = [int(r.find_elements(By.TAG_NAME, "td")[seed_column].text) for r in visible_rows(page)]
    assert seeds == sorted(seeds, reverse=True)
    seed_header.click()
    seeds = [int(r.find_elements(By.TAG_NAME, "td")[seed_column].text) for r in visible_rows(page)]
    assert seeds == sorted(seeds)
    screenshot(page, "dashboard-runs")

    progress = page.find_element(By.CSS_SELECTOR, 'tr[data-run-id="term-3"] td[data-field="rounds"]')
    expected = record_next_round(db, "term-3")  # while the page is open
    WebDriverWait(page, 20).until(lambda d: progress.text == expected)


def test_run_page_draws_every_chart_and_the_round_slider_moves(page, server):
    page.get(server.url + "/runs/term-1")
    wait_for_charts(page, [f"chart-{c}" for c in RUN_CHARTS])
    assert len(page.find_elements(By.CSS_SELECTOR, "#last-round tbody tr")) == 2
    assert page.find_element(By.ID, "round-value").text == "20"
    bars = page.find_elements(By.CSS_SELECTOR, "#chart-devices .bars .point")
    assert len(bars) == 23
    heatmap = page.find_elements(By.CSS_SELECTOR, "#chart-weights .hm, #chart-weights image")
    assert heatmap, "the tilted-weights heatmap was not drawn"
    page.execute_script("const r = document.getElementById('round'); r.value = '0';"
                        "r.dispatchEvent(new Event('input'));")  # fmt: skip
    WebDriverWait(page, 10).until(lambda d: "round 1, test" in d.find_element(By.ID, "chart-devices").text)
    assert page.find_element(By.ID, "round-value").text == "1"
    screenshot(page, "dashboard-run")


def test_running_run_page_shows_the_name_as_text_and_follows_new_rounds(page, server, db):
    page.get(server.url + "/runs/term-3")
    wait_for_charts(page, [f"chart-{c}" for c in RUN_CHARTS])
    assert page.find_element(By.CSS_SELECTOR, "h1.run-name").text == XSS
    assert page.title.startswith(XSS)
    assert_no_alert(page)
    rounds = page.find_element(By.CSS_SELECTOR, 'dd[data-field="rounds"]')
    expected = record_next_round(db, "term-3")  # while the page is open
    WebDriverWait(page, 20).until(lambda d: rounds.text == expected)


def test_comparison_page_overlays_the_strategies(page, server):
    page.get(f"{server.url}/compare?scenario={SCENARIO}")
    wait_for_charts(page, ["chart-compare-histogram"])
    cells = page.find_elements(By.CSS_SELECTOR, "#cells tbody tr")
    assert [row.find_element(By.TAG_NAME, "td").text for row in cells] == ["fedavg", "qffl q=1", "term t=1"]
    assert "±" in cells[0].text and "±" not in cells[1].text.split("(")[-1].split(")")[1]  # qffl: one seed
    legend = page.find_elements(By.CSS_SELECTOR, "#chart-compare-histogram .legendtext")
    assert [t.text for t in legend] == ["fedavg", "qffl q=1", "term t=1"]
    path = screenshot(page, "dashboard-comparison")
    docs = ROOT / "docs" / "dashboard-comparison.png"
    if not docs.exists() or os.environ.get("TERM_FL_UPDATE_SCREENSHOTS") == "1":
        docs.parent.mkdir(exist_ok=True)
        shutil.copyfile(path, docs)


def test_reports_open_from_disk_with_no_server(page, db, tmp_path):
    run_report = write_report(db, "term-2", tmp_path / "run.html")
    page.get(run_report.as_uri())
    wait_for_charts(page, [f"chart-{c}" for c in RUN_CHARTS])
    page.execute_script("const r = document.getElementById('round'); r.value = '4';"
                        "r.dispatchEvent(new Event('input'));")  # fmt: skip
    WebDriverWait(page, 10).until(lambda d: "round 5, test" in d.find_element(By.ID, "chart-devices").text)
    scenario_report = write_report(db, SCENARIO, tmp_path / "scenario.html")
    page.get(scenario_report.as_uri())
    wait_for_charts(page, ["chart-compare-histogram"])
    assert len(page.find_elements(By.CSS_SELECTOR, "#cells tbody tr")) == 3
    screenshot(page, "report-comparison")
