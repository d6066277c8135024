"""The quick start's pages as a new user sees them: 1280x800 screenshots of a running dashboard.

    term-fl run                                    # the quick start: TERM and its references
    term-fl dashboard --port 8050 &                # as the run's output says
    python scripts/story_screenshots.py --url http://127.0.0.1:8050 --scenario default --out docs/screenshots

Writes ``runs.png`` (the runs list), ``run.png`` (the page of the newest TERM
run of ``--scenario``) and ``compare.png`` (the comparison page of
``--scenario``), each the first 1280x800 of the page as a browser window of
that size shows it; ``run-charts.png`` and ``compare-charts.png``: the same
pages scrolled to their first charts. Needs Chromium and ChromeDriver
(``apt-get install chromium chromium-driver``) and selenium (the ``test``
extra); it talks only to the dashboard at ``--url``.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.request
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

SIZE = (1280, 800)
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage",
         "--disable-background-networking", "--disable-component-update", "--hide-scrollbars")  # fmt: skip


def drawn(driver: webdriver.Chrome, timeout: float = 30) -> None:
    """Until every chart div in the window holds Plotly's SVG (a page without charts: at once)."""
    top = driver.execute_script("return window.scrollY")
    WebDriverWait(driver, timeout).until(lambda d: all(
        div.find_elements(By.CSS_SELECTOR, ".main-svg") for div in d.find_elements(By.CSS_SELECTOR, "div.chart")
        if div.is_displayed() and top - 1000 < div.location["y"] < top + SIZE[1]
    ))  # fmt: skip
    time.sleep(1.5)


def newest_run(url: str, scenario: str) -> str:
    """The id of the newest run of ``scenario`` (the run the quick start made first is its TERM run)."""
    with urllib.request.urlopen(f"{url}/api/runs?scenario={scenario}") as answer:  # noqa: S310 (a loopback URL)
        runs = json.load(answer)
    runs = runs.get("runs", runs) if isinstance(runs, dict) else runs
    term = [r for r in runs if r.get("strategy") == "term"] or runs
    return term[0]["run_id"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the dashboard's address, e.g. http://127.0.0.1:8050")
    parser.add_argument("--scenario", default="default")
    parser.add_argument("--out", type=Path, required=True, help="folder for runs.png, run.png, compare.png")
    args = parser.parse_args()
    url = args.url.rstrip("/")
    args.out.mkdir(parents=True, exist_ok=True)
    options = Options()
    options.binary_location = "/usr/bin/chromium"
    for flag in FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        # the window's inner size, not its outer one, is 1280x800
        driver.set_window_size(*SIZE)
        inner = driver.execute_script("return [window.innerWidth, window.innerHeight]")
        driver.set_window_size(2 * SIZE[0] - inner[0], 2 * SIZE[1] - inner[1])
        run, compare = f"/runs/{newest_run(url, args.scenario)}", f"/compare?scenario={args.scenario}"
        # name -> (page, the element scrolled to the top of the window: None for the page's top)
        shots = {"runs": ("/", None), "run": (run, None), "run-charts": (run, ".chart.statistics"),
                 "compare": (compare, None), "compare-charts": (compare, "#tradeoff")}
        for name, (path, top) in shots.items():
            driver.get(url + path)
            if top is not None:
                driver.execute_script("document.querySelector(arguments[0]).scrollIntoView()", top)
            drawn(driver)
            driver.save_screenshot(str(args.out / f"{name}.png"))
            print(args.out / f"{name}.png")
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
