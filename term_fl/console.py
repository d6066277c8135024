"""Console output: per-round progress and the fairness table at the end of a run."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from term_fl.fairness import STATISTICS

if TYPE_CHECKING:  # the server loop imports Flower and torch: `term-fl runs` needs neither
    from term_fl.federation import RoundRecord


def make_console() -> Console:
    return Console(stderr=False, highlight=False)


class RoundPrinter:
    """Prints 'round k/N' with the current worst-10% and average, one line per round."""

    def __init__(self, console: Console, label: str = "") -> None:
        self.console = console
        self.label = f"{label} " if label else ""

    def __call__(self, record: RoundRecord, rounds: int) -> None:
        test = record.stats.get("test") or {}
        parts = [f"{self.label}round {record.server_round}/{rounds}"]
        if test:
            parts.append(f"average {test.get('pooled_mean', float('nan')):.4f}")
            parts.append(f"worst-10% {test.get('worst_10', float('nan')):.4f}")
        if record.status != "ok":
            parts.append("[bold red]FAILED[/]")
        if record.excluded:
            parts.append(f"({len(record.excluded)} replies excluded)")
        parts.append(f"{record.duration_s:.2f}s")
        self.console.print("  ".join(parts))
        sys.stdout.flush()


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def fairness_table(title: str, by_split: Mapping[str, Mapping[str, Any] | None]) -> Table:
    """A statistic x split table of one run's last round."""
    table = Table(title=title)
    table.add_column("statistic")
    splits = [s for s, v in by_split.items() if v]
    for split in splits:
        table.add_column(split, justify="right")
    for stat in STATISTICS:
        table.add_row(stat.label, *(_fmt(by_split[s].get(stat.key)) for s in splits))
    return table
