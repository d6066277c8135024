"""HTML rendering shared by the web app and the static report: Jinja2 with autoescape, static assets.

Every value a template prints is HTML-escaped; data handed to the page
scripts goes through :func:`script_json` (a ``<script type="application/json">``
body that no ``</script>`` inside a run name or config value can end).
"""

from __future__ import annotations

import json
import re
import time
import urllib.parse
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
import plotly

from term_fl.maths.fairness import GROUPS, STATISTICS, statistics_table
from term_fl.common.jsonable import plain
from term_fl.dashboard.queries import duration
from term_fl.strategies.registry import PARAM_KEYS

STATIC_DIR = Path(__file__).with_name("static")
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
POLL_SECONDS = 3


def script_json(obj: Any) -> str:
    """JSON for the body of a ``<script type="application/json">`` block (NaN -> null).

    ``<``, ``>`` and ``&`` are written as ``\\u003c`` ... so the text can
    neither close the script element nor open a comment; JSON.parse reads them back.
    """
    try:  # the dashboard's answers are plain JSON values already: no second walk through them
        text = json.dumps(obj, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError):  # numpy values, NaN, ±inf ...: made plain first
        text = json.dumps(plain(obj), allow_nan=False, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


_SCRIPT_END = re.compile(r"<(/script|!--)", re.IGNORECASE)


def pretty_json(obj: Any) -> str:
    """Indented JSON to show in a page (the template escapes it like any text)."""
    return json.dumps(plain(obj), indent=2, ensure_ascii=False)


def inline_script(source: str) -> str:
    """JavaScript source made safe to inline in a ``<script>`` element (``</script`` -> ``<\\/script``)."""
    return _SCRIPT_END.sub(lambda m: "<\\" + m.group(1), source)


def fmt(value: Any, digits: int = 3) -> str:
    """A statistic for a table cell: 3 decimals, an em dash when missing."""
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def param(value: Any) -> str:
    """A strategy parameter (t, q, tau) as written in a config: ``1``, ``0.5``, ``1e-05``; empty when unset."""
    return "" if value is None else f"{value:g}"


def path_segment(value: Any) -> str:
    """A run id as one URL path segment: every reserved character (``/``, ``,``, ``?``, ``#`` ...) escaped."""
    return urllib.parse.quote(str(value), safe="")


def file_stem(value: Any) -> str:
    """A run id as part of a download's file name: anything but letters, digits, ``.``, ``_``, ``-`` -> ``_``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(value))


def fmt_time(stamp: float | None) -> str:
    """Unix seconds as UTC date and time."""
    return "—" if stamp is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(stamp))


def fmt_duration(seconds: float | None) -> str:
    """Seconds as '7.5 s', '3 min 20 s' or '2 h 05 min'; '—' for none (a run that has not ended)."""
    if seconds is None:
        return "—"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes} min {int(seconds % 60):02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("term_fl.dashboard", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(fmt=fmt, param=param, fmt_time=fmt_time, fmt_duration=fmt_duration, duration=duration,
                       pretty_json=pretty_json, path_segment=path_segment, file_stem=file_stem)  # fmt: skip
    env.globals.update(
        PARAM_KEYS=PARAM_KEYS,  # the strategies' parameters (term_fl.strategies.registry)
        STATISTICS=STATISTICS,  # every statistic (term_fl.maths.fairness), in table order
        HEADLINE=[s for s in STATISTICS if s.headline],  # the compact tables' statistics
        GROUPS=GROUPS,  # one chart per group of statistics
        STATISTICS_JSON=script_json(statistics_table()),  # the same table for the page scripts
        POLL_SECONDS=POLL_SECONDS,
    )
    return env


def render(template: str, *, report: dict[str, Any] | None = None, **context: Any) -> str:
    """Render a page. With ``report`` (the page's data), CSS, plotly.js, the scripts and the data are inlined."""
    assets = None
    if report is not None:
        assets = {
            "css": (STATIC_DIR / "dashboard.css").read_text(encoding="utf-8"),
            "plotly": inline_script(plotly_js()),
            "scripts": [inline_script(source) for source in page_scripts(template)],
            "data": script_json(report),
        }
    return environment().get_template(template).render(assets=assets, **context)


def page_scripts(template: str) -> list[str]:
    """The sources of the scripts a page runs after plotly.js: the shared one, then the page's own."""
    page = template.removesuffix(".html") + ".js"
    return [(STATIC_DIR / name).read_text(encoding="utf-8") for name in ("common.js", page)]


@cache
def plotly_js() -> str:
    """plotly.min.js as bundled with the plotly Python package (never a CDN)."""
    return PLOTLY_JS.read_text(encoding="utf-8")
