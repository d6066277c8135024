"""The printed table (rich) and the JSON file of a benchmark run."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from .common import BenchResult

COLUMNS = ("benchmark", "measured", "baseline", "ratio/target", "verdict")
STYLES = {"PASS": "green", "MISS": "red", "ERROR": "bold red", "n/a": "yellow", "info": "cyan"}


def table(results: list[BenchResult], title: str) -> Table:
    out = Table(title=title, show_lines=True)
    for col in COLUMNS:
        out.add_column(col, overflow="fold")
    for res in results:
        for row in res.rows:
            style = STYLES.get(row.verdict, "")
            out.add_row(row.benchmark, row.measured, row.baseline, row.ratio_target,
                        f"[{style}]{row.verdict}[/]" if style else row.verdict)
    return out


def print_table(results: list[BenchResult], title: str, console: Console | None = None) -> None:
    (console or Console()).print(table(results, title))


def markdown_table(results: list[BenchResult]) -> str:
    """The same table as GitHub markdown (for benchmarks/README.md)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for res in results:
        for row in res.rows:
            cells = (row.benchmark, row.measured, row.baseline, row.ratio_target, row.verdict)
            lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


def _clean(obj: Any) -> Any:
    """NaN / inf -> None so the file is strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return obj


def write_json(path: Path, results: list[BenchResult], meta: dict[str, Any]) -> None:
    data = {**meta, "benchmarks": {r.name: r.to_json() for r in results}, "table_markdown": markdown_table(results)}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_clean(data), indent=2, default=str) + "\n", encoding="utf-8")
