"""The quick start as a new user walks it, in a real browser: `term-fl run`, then the dashboard its output names.

`term-fl run` (the embedded default: TERM t=3 and its references FedAvg and FedAvg (uniform), fewer rounds)
writes a store and prints its differences and the next step; the dashboard over that store is driven by
headless Chromium (as tests/test_dashboard_browser.py does), and its compare page must show TERM against
each reference with the same differences the console printed, the legends that explain the marks and the
directions, and no setting that "differs" between a run and its references.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_dashboard_browser import CHROMEDRIVER, CHROMIUM, FLAGS, ServerThread, wait_for_charts

from term_fl.cli.commands import main
from term_fl.dashboard import create_app

pytestmark = [pytest.mark.browser, pytest.mark.slow]

webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (pip install selenium)")
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

QUICK = ["--rounds", "30", "--set", "run.evaluate_every=5"]  # the default scenario, fewer rounds


@pytest.fixture(scope="module")
def quick_start(tmp_path_factory) -> dict:
    """`term-fl run` as the README says, with fewer rounds: its store, its printed output, its runs' summaries."""
    import contextlib
    import io

    root = tmp_path_factory.mktemp("quickstart")
    db, out = root / "runs" / "results.db", root / "runs" / "term"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["run", *QUICK, "--db", str(db), "--out", str(out)]) == 0
    summaries = {name: json.loads((root / "runs" / folder / "summary.json").read_text())
                 for name, folder in (("term", "term"), ("fedavg", "term-reference-fedavg"),
                                      ("fedavg_uniform", "term-reference-fedavg_uniform"))}  # fmt: skip
    return {"db": db, "printed": printed.getvalue(), "summaries": summaries}


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    options = Options()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _js_fixed(value: float) -> str:
    """How the compare page writes a mean difference: 3 decimals, '+' before a positive one."""
    return ("+" if value > 0 else "") + f"{value:.3f}"


def test_the_run_output_names_the_dashboard_of_its_store(quick_start):
    lines = quick_start["printed"].splitlines()
    assert f"  term-fl dashboard --db {quick_start['db']}    (then open /compare?scenario=default)" in lines


def test_the_compare_page_shows_the_differences_the_console_printed(quick_start, browser):
    term, runs = quick_start["summaries"]["term"], quick_start["summaries"]
    with ServerThread(create_app(quick_start["db"])) as server:
        browser.get(f"{server.url}/compare?scenario=default")
        WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#differences tbody tr"))
        wait_for_charts(browser, ["chart-tradeoff-0", "chart-tradeoff-1"])
        headers = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#differences thead th")]
        rows = {tuple(td.text for td in row.find_elements(By.TAG_NAME, "td")[:2]): row
                for row in browser.find_elements(By.CSS_SELECTOR, "#differences tbody tr")}  # fmt: skip
        for reference in ("fedavg", "fedavg_uniform"):
            cells = [td.text for td in rows[("term t=3", reference)].find_elements(By.TAG_NAME, "td")]
            for key, label in (("worst_10", "Δ worst 10% ↑"), ("mean", "Δ device mean ↑"), ("std", "Δ std ↓")):
                difference = term["test"][key] - runs[reference]["test"][key]
                # the console's table: TERM minus each reference, 4 decimals
                assert f"{difference:+.4f}" in quick_start["printed"]
                assert cells[headers.index(label)] == _js_fixed(difference)
            assert cells[headers.index("pairs")] == "1"
        legend = browser.find_element(By.ID, "differences-legend").text
        assert "↑ higher is better, ↓ lower is better" in legend and "* significant: p_holm < 0.05" in legend
        assert "never with fewer than 3 paired seeds" in legend
        page = browser.find_element(By.TAG_NAME, "main").text
        assert "reference=" not in page and "differ in settings" not in page  # run.reference is not a setting
        assert not browser.find_element(By.ID, "ring-note").is_displayed()  # no validation choice here, no ring


def test_the_runs_list_and_the_run_page_read_as_promised(quick_start, browser):
    term = quick_start["summaries"]["term"]
    with ServerThread(create_app(quick_start["db"])) as server:
        browser.get(f"{server.url}/")
        ids = [code.text for code in browser.find_elements(By.CSS_SELECTOR, "#runs-table code.run-id")]
        assert term["run_id"] in ids and len(ids) == 3  # the ids are on the page, not only in a tooltip
        headers = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#runs-table thead th")]
        assert "duration" in headers and "lambda_lr" not in headers  # no column that is empty on every row
        browser.get(f"{server.url}/runs/{term['run_id']}")
        wait_for_charts(browser, ["chart-accuracy", "chart-spread"])
        shown = browser.execute_script(
            "return document.getElementById('chart-accuracy').data.filter((t) => t.visible === true).map((t) => t.name)")
        assert shown and all(name.endswith("(test)") for name in shown)  # validation curves start hidden
        title = browser.execute_script("return document.getElementById('chart-accuracy').layout.yaxis.title.text")
        assert title == "accuracy, higher is better"
        # a flat curve (every value 0) gets an axis around its value, not Plotly's -1..1; spread values keep
        # Plotly's own range
        assert browser.execute_script("return TermFL.flatRange([0, 0, null, 0])") == {"range": [-0.05, 0.05]}
        assert browser.execute_script("return TermFL.flatRange([0.8, 0.8])")["range"] == pytest.approx([0.75, 0.85])
        assert browser.execute_script("return TermFL.flatRange([-10])")["range"] == pytest.approx([-10.5, -9.5])
        assert browser.execute_script("return TermFL.flatRange([0.1, 0.9])") == {}
