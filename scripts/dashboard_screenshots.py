"""The README's dashboard pictures, taken with headless Chromium from a real results store.

    term-fl sweep configs/vehicle-sensor.toml                      # the comparison
    term-fl sweep my-grid.toml                                     # optional: a sweep over t and q
    python scripts/dashboard_screenshots.py --db runs/results.db --scenario vehicle-sensor \\
        [--sweep-scenario NAME] [--out docs]

Writes ``dashboard-comparison.png`` (the top of the comparison page of
``--scenario``: notices, the cells table, the trade-off, the per-round
curves) and ``dashboard-tradeoff.png`` (the trade-off section of
``--sweep-scenario``, or of ``--scenario``: each statistic against t and q
when it is a sweep). Needs Chromium and ChromeDriver
(``apt-get install chromium chromium-driver``) and selenium (the ``test``
extra). It starts the dashboard on a free loopback port and stops it.
"""

from __future__ import annotations

import argparse
import socket
import threading
import time
from pathlib import Path

import uvicorn
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from term_fl.dashboard import create_app

WIDTH = 1400
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage",
         "--disable-background-networking", "--disable-component-update", "--hide-scrollbars")  # fmt: skip


def serve(db: Path) -> tuple[uvicorn.Server, threading.Thread, str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(db), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    return server, thread, f"http://127.0.0.1:{sock.getsockname()[1]}"


def drawn(driver: webdriver.Chrome, timeout: float = 60) -> None:
    """Until every chart div on the page holds Plotly's SVG."""
    WebDriverWait(driver, timeout).until(lambda d: all(
        div.find_elements(By.CSS_SELECTOR, ".main-svg") for div in d.find_elements(By.CSS_SELECTOR, "div.chart")
    ))  # fmt: skip
    time.sleep(1.0)


def shoot(driver: webdriver.Chrome, url: str, out: Path, *, top: str | None, bottom: str) -> None:
    """A screenshot of the page from the element ``top`` (None: the page top) to the end of ``bottom``."""
    driver.get(url)
    drawn(driver)
    rect = "const r = document.querySelector(arguments[0]).getBoundingClientRect(); return [r.top + scrollY, r.bottom + scrollY];"
    y0 = 0 if top is None else driver.execute_script(rect, top)[0] - 8
    y1 = driver.execute_script(rect, bottom)[1] + 8
    height = int(y1)
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": WIDTH, "height": height, "deviceScaleFactor": 1, "mobile": False})  # fmt: skip
    time.sleep(1.5)  # the responsive charts redraw for the new size
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot",
        {"format": "png", "clip": {"x": 0, "y": y0, "width": WIDTH, "height": y1 - y0, "scale": 1}},
    )
    import base64

    out.write_bytes(base64.b64decode(shot["data"]))
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    print(f"wrote {out} ({WIDTH} x {int(y1 - y0)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--scenario", required=True, help="the scenario of the comparison picture")
    parser.add_argument("--sweep-scenario", help="the scenario of the trade-off picture (default: --scenario)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "docs")
    args = parser.parse_args()
    options = Options()
    options.binary_location = "/usr/bin/chromium"
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--window-size={WIDTH},1000")
    server, thread, url = serve(args.db.resolve())
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        shoot(driver, f"{url}/compare?scenario={args.scenario}", args.out / "dashboard-comparison.png",
              top=None, bottom="#per-round")  # fmt: skip
        sweep = args.sweep_scenario or args.scenario
        shoot(driver, f"{url}/compare?scenario={sweep}", args.out / "dashboard-tradeoff.png",
              top="#tradeoff", bottom="#tradeoff")  # fmt: skip
    finally:
        driver.quit()
        server.should_exit = True
        thread.join(timeout=15)


if __name__ == "__main__":
    main()
