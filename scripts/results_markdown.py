"""A sweep's comparison.json as the Markdown tables of docs/scenarios.md and the README.

    python scripts/results_markdown.py runs/sweep-fairness/comparison.json [--cells 'term t=3' ...]

Prints, from the file alone (nothing recomputed): the seeds it was chosen
and reported on, the choice per family with its rule, and one row per
cell: the test statistics (mean over the report seeds) and each paired
difference against each baseline (mean ± standard error, ``p_holm`` in
brackets, **bold** where the product marks it significant). The numbers are
the ones `term-fl sweep`, the dashboard and the report show.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

STATS = (("mean", "device mean"), ("pooled_mean", "pooled"), ("worst_10", "worst 10%"), ("std", "std"))


def _range(seeds: list[int]) -> str:
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds)) or "none"


def _difference(d: dict[str, Any] | None) -> str:
    if not d or d.get("mean") is None:
        return ""
    text = f"{d['mean']:+.3f} ± {d['se']:.3f}" if d.get("se") is not None else f"{d['mean']:+.3f}"
    holm = d.get("p_holm")
    text += f" ({holm:.2g})" if holm is not None else " (no test)"
    return f"**{text}**" if d.get("significant") else text


def tables(comparison: dict[str, Any], only: list[str] | None = None) -> str:
    """The Markdown of one comparison.json: seeds, choices, and the cells' test statistics and differences."""
    seeds, lines = comparison.get("seeds") or {}, []
    if seeds:
        lines.append(f"Selection seeds: {_range(seeds['selection'])}; report seeds: {_range(seeds['report'])}"
                     + (" (the same seeds)" if seeds.get("shared") else "") + ".")
    for family, choice in (comparison.get("selection") or {}).items():
        lines.append(f"Chosen for {family}: {choice['cell']} ({choice['rule']}).")
    baselines = [b["strategy"] for b in comparison.get("baselines", [])]
    head = ["cell", "seeds"] + [f"test {label}" for _, label in STATS]
    head += [f"{label} − {b}" for b in baselines for _, label in STATS if label != "std"]
    lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    chosen = {c["cell"] for c in (comparison.get("selection") or {}).values()}
    for row in comparison["cells"]:
        if only and row["cell"] not in only:
            continue
        name = row["cell"] + (" ✓" if row["cell"] in chosen else "")
        cells = [name, str(row["n"])] + [f"{row.get(f'test.{key}', float('nan')):.3f}" for key, _ in STATS]
        for b in baselines:
            test = (row.get("differences") or {}).get(b, {}).get("test", {})
            cells += [_difference(test.get(key)) for key, label in STATS if label != "std"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("comparison", type=Path, help="a sweep's comparison.json")
    parser.add_argument("--cells", nargs="*", help="only these cells (their labels in the file)")
    args = parser.parse_args(argv)
    print(tables(json.loads(args.comparison.read_text()), args.cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
