"""The dashboard in a real browser: headless Debian Chromium driven by Selenium.

A uvicorn server runs the app in a background thread on a free loopback port
over a store of FedAvg, q-FFL and TERM runs (and a small sweep over q and t);
the test loads the pages, waits for Plotly to draw, clicks what a user
clicks (a device's bar, a heatmap row, the CSV links), checks what a user
sees and what a download holds, and fails on any SEVERE message in the
browser console. Screenshots go to artifacts/ (the README's pictures come
from a real sweep: scripts/dashboard_screenshots.py).

Needs /usr/bin/chromium and /usr/bin/chromedriver
(``apt-get install -y chromium chromium-driver``) and selenium; skipped otherwise.
"""

from __future__ import annotations

import csv
import io
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from test_dashboard import RUNS, SCENARIO, XSS, build_store
from test_dashboard_compare import CELLS, SEEDS, record
from test_dashboard_compare import SCENARIO as SWEEP

import term_fl.dashboard.report as report_module
import term_fl.results.schema as results_module
from term_fl.dashboard import compare_view, create_app, write_report
from term_fl.maths.fairness import GROUPS
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
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
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
COMPARE_CHARTS = ("chart-tradeoff-0", "chart-tradeoff-1", "chart-curve-mean", "chart-curve-pooled_mean",
                  "chart-curve-worst_10", "chart-curve-std", "chart-curve-risk", "chart-ecdf")  # fmt: skip


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
    with ResultsStore(path) as store:  # a sweep over q and t, seed 0 of term t=5 run twice
        for strategy, params, spread in CELLS:
            for seed in SEEDS:
                run_id = "-".join([strategy, *(f"{v:g}" for v in params.values()), f"s{seed}"])
                record(store, run_id, strategy, params, seed, spread)
        record(store, "term-5-s0-again", "term", {"t": 5.0}, 0, 0.4)
    return path


@pytest.fixture(scope="module")
def server(db):
    # the running run stays running however slow this machine is (no heartbeat beats here)
    with pytest.MonkeyPatch.context() as patch, ServerThread(create_app(db)) as running:
        patch.setattr(results_module, "LOST_AFTER_S", 24 * 3600.0)
        yield running


@pytest.fixture(scope="module")
def downloads(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("downloads")


@pytest.fixture(scope="module")
def browser(tmp_path_factory, downloads):
    options = Options()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    options.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                              "download.prompt_for_download": False})  # fmt: skip
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
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


def test_runs_page_filters_on_the_server_sorts_and_shows_names_as_text(page, server, db):
    page.get(f"{server.url}/?scenario={SCENARIO}")
    WebDriverWait(page, 20).until(lambda d: d.find_element(By.ID, "row-count").text == f"runs 1–{len(RUNS)} of {len(RUNS)}")
    assert page.find_element(By.CSS_SELECTOR, 'tr[data-run-id="term-3"] td.name a').text == XSS
    assert_no_alert(page)

    box = page.find_element(By.ID, "filter-text")
    box.send_keys("qffl\n")  # the form asks the server
    WebDriverWait(page, 20).until(lambda d: "q=qffl" in d.current_url)
    assert [r.get_attribute("data-run-id") for r in visible_rows(page)] == ["qffl-1"]
    page.get(f"{server.url}/?scenario={SCENARIO}")
    page.execute_script("const s = document.getElementById('filter-status'); s.value = 'running';"
                        "s.dispatchEvent(new Event('change'));")  # fmt: skip
    WebDriverWait(page, 20).until(lambda d: "status=running" in d.current_url)
    assert [r.get_attribute("data-run-id") for r in visible_rows(page)] == ["term-3"]

    page.get(f"{server.url}/?scenario={SCENARIO}")
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


def test_comparison_page_draws_every_view(page, server):
    page.get(f"{server.url}/compare?scenario={SCENARIO}")
    wait_for_charts(page, COMPARE_CHARTS)
    cells = page.find_elements(By.CSS_SELECTOR, "#cells tbody tr")
    assert [row.find_element(By.TAG_NAME, "td").text for row in cells] == ["fedavg", "qffl q=1", "term t=1"]
    assert "±" in cells[0].text
    # the paired differences: each cell minus FedAvg, every primary statistic, and what a mark means
    differences = [[td.text for td in row.find_elements(By.TAG_NAME, "td")]
                   for row in page.find_elements(By.CSS_SELECTOR, "#differences tbody tr")]  # fmt: skip
    assert [row[:2] for row in differences] == [["qffl q=1", "fedavg"], ["term t=1", "fedavg"]]
    heads = [th.text for th in page.find_elements(By.CSS_SELECTOR, "#differences thead th")]
    assert heads[3:] == ["Δ device mean ↑", "Δ pooled ↑", "Δ worst 10% ↑", "Δ std ↓", "ahead from round"]
    assert "significant: p_holm < 0.05" in page.find_element(By.ID, "differences-legend").text
    legend = [t.text for t in page.find_elements(By.CSS_SELECTOR, "#chart-ecdf .legendtext")]
    assert legend == ["fedavg (46 devices)", "qffl q=1 (23 devices)", "term t=1 (46 devices)"]
    assert not page.find_elements(By.CSS_SELECTOR, "#chart-ecdf .bars")  # lines, no overlaid histograms
    # a shaded standard-error band under every cell's curve of more than one seed: two filled traces
    fills = page.find_elements(By.CSS_SELECTOR, "#chart-curve-worst_10 .scatterlayer .trace path.js-fill")
    assert len(fills) >= 2


def test_a_sweep_shows_its_tradeoff_choice_and_each_statistic_against_t_and_q(page, server):
    page.get(f"{server.url}/compare?scenario={SWEEP}")
    wait_for_charts(page, COMPARE_CHARTS)
    labels = [row.find_element(By.TAG_NAME, "td").text for row in page.find_elements(By.CSS_SELECTOR, "#cells tbody tr")]
    assert [label.rstrip(" ✓") for label in labels] == ["fedavg", "qffl q=1", "qffl q=5", "term t=1", "term t=5"]
    assert sum("✓" in label for label in labels) == 2  # one choice for q, one for t
    assert "✓ chosen on the validation split" in page.find_element(By.ID, "cells-legend").text
    notices = page.find_element(By.ID, "notices").text
    assert "seed 0 ran 2 times" in notices and "a repeat, not a new sample" in notices
    legend = [t.text for t in page.find_elements(By.CSS_SELECTOR, "#chart-tradeoff-0 .legendtext")]
    # one legend entry per cell (labels on the points collided where cells coincide), then the ring
    assert legend == ["fedavg", "qffl q=1", "qffl q=5", "term t=1", "term t=5", "chosen on validation"]
    assert page.find_element(By.ID, "ring-note").is_displayed()
    sweeps = [h.text for h in page.find_elements(By.CSS_SELECTOR, "#sweeps h3")]
    assert sweeps == ["q-FFL: each statistic against q", "TERM: each statistic against t"]
    # every column of both tables, "ahead from round" (the last) included, is in view at 1400 px: no sideways scroll
    for table in ("cells", "differences"):
        wrap = page.find_element(By.ID, table).find_element(By.XPATH, "./ancestor::div[@class='table-wrap']")
        widths = page.execute_script("return [arguments[0].scrollWidth, arguments[0].clientWidth]", wrap)
        assert widths[0] <= widths[1], f"the {table} table is {widths[0]} px wide in {widths[1]} px"
    screenshot(page, "dashboard-comparison")
    split = page.find_element(By.ID, "compare-split")
    page.execute_script("arguments[0].value = 'val'; arguments[0].dispatchEvent(new Event('change'));", split)
    WebDriverWait(page, 10).until(lambda d: "(validation)" in d.find_element(By.ID, "chart-tradeoff-0").text
                                  or "(val)" in d.find_element(By.ID, "chart-tradeoff-0").text)  # fmt: skip


def wait_for_download(folder: Path, name: str, timeout: float = 20) -> str:
    path = folder / name
    deadline = time.monotonic() + timeout
    while not (path.exists() and not list(folder.glob("*.crdownload"))):
        assert time.monotonic() < deadline, f"{name} was not downloaded into {folder}: {list(folder.iterdir())}"
        time.sleep(0.1)
    text = path.read_bytes().decode("utf-8")  # as served: CSV lines end with \r\n
    path.unlink()
    return text


def test_csv_links_download_what_the_api_serves(page, server, downloads):
    import urllib.request

    def api(url: str) -> str:
        with urllib.request.urlopen(server.url + url) as response:
            return response.read().decode()

    page.get(f"{server.url}/compare?scenario={SWEEP}")
    wait_for_charts(page, ["chart-tradeoff-0"])
    page.find_element(By.CSS_SELECTOR, 'a[data-csv="cells"]').click()
    cells = wait_for_download(downloads, "compare-cells.csv")
    assert cells == api(f"/api/compare.csv?scenario={SWEEP}&table=cells")
    assert [r["cell"] for r in csv.DictReader(io.StringIO(cells))] == ["fedavg", "qffl q=1", "qffl q=5", "term t=1",
                                                                      "term t=5"]  # fmt: skip
    page.find_element(By.CSS_SELECTOR, 'a[data-csv="curves"]').click()
    assert wait_for_download(downloads, "compare-curves.csv") == api(f"/api/compare.csv?scenario={SWEEP}&table=curves")
    page.get(f"{server.url}/runs/term-1-s1")
    wait_for_charts(page, ["chart-devices"])
    page.find_element(By.CSS_SELECTOR, 'a[data-csv="devices"]').click()
    assert wait_for_download(downloads, "term-1-s1-devices.csv") == api("/api/runs/term-1-s1/devices.csv")


def test_a_click_on_a_device_opens_its_drilldown_and_the_heatmap_sorts(page, server):
    page.get(server.url + "/runs/term-1")
    wait_for_charts(page, ["chart-devices", "chart-weights"])
    assert not page.find_element(By.ID, "drilldown").is_displayed()
    bars = page.find_elements(By.CSS_SELECTOR, "#chart-devices .bars .point")
    page.execute_script("arguments[0].scrollIntoView({block: 'center'})", bars[-1])
    ActionChains(page).move_to_element(bars[-1]).click().perform()  # Plotly takes the click on its drag layer
    WebDriverWait(page, 10).until(lambda d: d.find_element(By.ID, "drilldown").is_displayed())
    device = page.find_element(By.ID, "drilldown").get_attribute("data-partition-id")
    assert page.find_element(By.ID, "drilldown-title").text == f"device {device} over the rounds"
    wait_for_charts(page, ["chart-device-accuracy", "chart-device-loss", "chart-device-weight", "chart-device-samples"])
    assert "sampled in" in page.find_element(By.ID, "drilldown-summary").text
    # the highest bar is the best device: its accuracy over the rounds ends at that bar's height
    last = page.execute_script("const d = document.getElementById('chart-device-accuracy').data[0];"
                               "return d.y[d.y.length - 1];")  # fmt: skip
    best = page.execute_script("const d = document.getElementById('chart-devices').data[0];"
                               "return d.y[d.y.length - 1];")  # fmt: skip
    assert last == pytest.approx(best)
    screenshot(page, "dashboard-drilldown")

    order = lambda: page.execute_script("return document.getElementById('chart-weights').data[0].y;")  # noqa: E731
    assert order()[:3] == ["device 0", "device 1", "device 2"]
    sizes = page.execute_script("const w = document.getElementById('chart-weights').data[0];"
                                "return w.customdata.map((row) => row[0][0]);")  # fmt: skip
    page.execute_script("const s = document.getElementById('weights-sort'); s.value = 'size';"
                        "s.dispatchEvent(new Event('change'));")  # fmt: skip
    WebDriverWait(page, 10).until(lambda d: order()[0] != "device 0")
    sorted_sizes = page.execute_script("const w = document.getElementById('chart-weights').data[0];"
                                       "return w.customdata.map((row) => row[0][0]);")  # fmt: skip
    assert sorted_sizes == sorted(sizes, reverse=True)
    row = page.find_element(By.CSS_SELECTOR, "#chart-weights .nsewdrag")
    ActionChains(page).move_to_element_with_offset(row, 0, -row.size["height"] // 2 + 5).click().perform()
    WebDriverWait(page, 10).until(
        lambda d: d.find_element(By.ID, "drilldown").get_attribute("data-partition-id") == order()[0].split()[-1]
    )


def test_a_failed_run_shows_its_error_and_its_page_stops_polling(page, server, db):
    page.get(server.url + "/runs/term-3")
    wait_for_charts(page, ["chart-accuracy"])
    with ResultsStore(db) as writer:  # the run fails while its page is open
        writer.finish_run("term-3", "failed", error="RuntimeError: the device ran out of memory")
    WebDriverWait(page, 20).until(lambda d: d.find_element(By.ID, "run-error").is_displayed())
    assert page.find_element(By.ID, "run-error").text == "RuntimeError: the device ran out of memory"
    assert page.find_element(By.CSS_SELECTOR, 'dd[data-field="status"]').text == "failed"
    count = "return performance.getEntriesByType('resource').filter((e) => e.name.includes('/api/runs/term-3?') || e.name.endsWith('/api/runs/term-3')).length;"
    before = page.execute_script(count)
    time.sleep(7)  # two polling periods
    assert page.execute_script(count) == before


def test_reports_open_from_disk_with_no_server(page, db, tmp_path, downloads):
    run_report = write_report(db, "term-2", tmp_path / "run.html")
    page.get(run_report.as_uri())
    wait_for_charts(page, [f"chart-{c}" for c in RUN_CHARTS])
    page.execute_script("const r = document.getElementById('round'); r.value = '4';"
                        "r.dispatchEvent(new Event('input'));")  # fmt: skip
    WebDriverWait(page, 10).until(lambda d: "round 5, test" in d.find_element(By.ID, "chart-devices").text)
    bars = page.find_elements(By.CSS_SELECTOR, "#chart-devices .bars .point")
    page.execute_script("arguments[0].scrollIntoView({block: 'center'})", bars[0])
    ActionChains(page).move_to_element(bars[0]).click().perform()
    WebDriverWait(page, 10).until(lambda d: d.find_element(By.ID, "drilldown").is_displayed())
    wait_for_charts(page, ["chart-device-accuracy"])
    scenario_report = write_report(db, SWEEP, tmp_path / "scenario.html")
    page.get(scenario_report.as_uri())
    wait_for_charts(page, COMPARE_CHARTS)
    assert len(page.find_elements(By.CSS_SELECTOR, "#cells tbody tr")) == 5
    assert len(page.find_elements(By.CSS_SELECTOR, "#sweeps h3")) == 2
    page.find_element(By.CSS_SELECTOR, 'a[data-csv="cells"]').click()
    text = wait_for_download(downloads, "compare-cells.csv")
    assert text == report_csv(scenario_report, "cells")
    # the curves' CSV is built in the page from the inlined curves: the server's table, row for row
    link = page.find_element(By.CSS_SELECTOR, 'a[data-csv="curves"]')
    assert link.text == "per-round curves (CSV)" and not page.find_element(By.ID, "curves-status").is_displayed()
    link.click()
    with ResultsStore.open_readonly(db) as store:
        expected = compare_view.compare_csv(store, "curves", scenario=SWEEP)
    assert same_csv(wait_for_download(downloads, "compare-curves.csv"), expected)
    screenshot(page, "report-comparison")
    # a report holds at most REPORT_CURVE_POINTS rounds per cell, and says so where it thins
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(report_module, "REPORT_CURVE_POINTS", 3)
        thinned_report = write_report(db, SWEEP, tmp_path / "thinned.html")
    page.get(thinned_report.as_uri())
    wait_for_charts(page, COMPARE_CHARTS)
    assert "show 3 of them" in page.find_element(By.ID, "curves-status").text
    link = page.find_element(By.CSS_SELECTOR, 'a[data-csv="curves"]')
    assert link.text == "per-round curves (CSV, at most 3 rounds per cell)"
    link.click()
    rows = list(csv.DictReader(io.StringIO(wait_for_download(downloads, "compare-curves.csv"))))
    assert {r["round"] for r in rows} == {"1", "3", "4"}


def same_csv(got: str, expected: str) -> bool:
    """The same table: equal text fields, and numbers equal as numbers (JavaScript writes 1.0 as 1)."""
    def parse(text: str) -> list[list[Any]]:
        return [[float(v) if v and v[0] in "-0123456789" else v for v in row] for row in csv.reader(io.StringIO(text))]

    assert got.endswith("\r\n") and got.count("\r\n") == expected.count("\r\n") > 1
    return parse(got) == parse(expected)


def report_csv(path: Path, table: str) -> str:
    from test_dashboard import report_data

    return report_data(path.read_text())["csv"][table]


def test_the_content_security_policy_is_in_force_and_the_pages_still_draw(browser, server):
    """Every other test draws its page under the policy with no console error; here, a script that got into a
    page (as an injected run name would) does not run, and the browser says why."""
    browser.get_log("browser")
    browser.get(f"{server.url}/runs/fedavg-1")
    wait_for_charts(browser, ["chart-accuracy"])
    ran = browser.execute_script(
        "const s = document.createElement('script'); s.textContent = 'window.injected = true';"
        "document.body.appendChild(s); return window.injected === true;")
    assert ran is False
    refused = [e["message"] for e in browser.get_log("browser") if "Content Security Policy" in e["message"]]
    assert refused and "script-src 'self'" in refused[0]
