"""The one source of comparison numbers: cells over seeds, paired differences against every baseline, marks.

The sweep's console table and ``comparison.csv`` / ``.json``
(:mod:`term_fl.comparison.summaries`), the dashboard's comparison page and
the static report (``term_fl.dashboard.compare_view``) all call
:func:`compare_cells`; what they show is its answer, so they show the same
statistics, the same differences and the same marks.

Per cell and split: each statistic's mean ± standard error over seeds
(:func:`term_fl.comparison.paired.mean_se`); against each baseline cell of
the same settings (:func:`term_fl.comparison.pairing.baseline_cells`), each
statistic's paired difference over the seeds both ran, with the paired
t-test's p-value and 95% interval and the exact sign-flip p-value
(:func:`term_fl.comparison.paired.paired_difference`). Holm's family is one
table (one split of one comparison): every paired difference of a primary
statistic (``primary=True`` in :data:`term_fl.maths.fairness.STATISTICS`:
device mean, pooled, worst 10%, std), i.e. the non-reference cells x their
baselines x the four primary statistics; ``p_holm`` is their adjusted
p-value, and a difference is marked significant when ``p_holm`` <
:data:`~term_fl.comparison.paired.ALPHA` with at least
:data:`~term_fl.comparison.paired.MIN_SEEDS` paired seeds. Other statistics
carry their raw p-value and are never marked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from term_fl.comparison.paired import ALPHA, MIN_SEEDS, holm, is_significant, mean_se, paired_difference
from term_fl.comparison.pairing import baseline_cells
from term_fl.maths.fairness import flagged

__all__ = ["CHOSEN_MARK", "DIFFERENCE_FIELDS", "PRIMARY", "SIGNIFICANCE", "SIGNIFICANT_MARK", "CellValues",
           "compare_cells", "difference_columns", "significance_notes"]

PRIMARY: tuple[str, ...] = flagged("primary")
"""The statistics Holm's family holds and every paired-difference table shows."""

SIGNIFICANT_MARK = "*"
CHOSEN_MARK = "✓"

SIGNIFICANCE = (
    f"{SIGNIFICANT_MARK} significant: p_holm < {ALPHA:g}, the paired t-test over seeds (n - 1 degrees of freedom, "
    "two-sided) with Holm's correction over the table's paired differences of device mean, pooled, worst 10% and "
    f"std (every cell against each of its baselines); never with fewer than {MIN_SEEDS} paired seeds. "
    "Other statistics: raw p-values, no mark."
)
"""What a mark means: the sentence next to every table of paired differences (console, comparison.json,
dashboard, report)."""

CHOSEN = f"{CHOSEN_MARK} chosen on the validation split by the scenario's selection rule, reported on test"
"""What the validation choice's mark means, next to every table that marks it."""

DIFFERENCE_FIELDS = ("mean", "se", "n", "p_value", "p_holm", "ci95_lo", "ci95_hi", "p_signflip", "significant")
"""The columns of one paired difference in a CSV (``ci95`` as its two ends)."""


@dataclass(frozen=True)
class CellValues:
    """One cell as the comparison reads it.

    Attributes
    ----------
    key : str
        The cell's identity (its ``config_hash``).
    strategy : str
        Its ``strategy.name``.
    settings : mapping
        Its flat settings (:func:`term_fl.comparison.cells.flat_settings`):
        what pairing reads.
    values : mapping
        split -> statistic -> seed -> the value of that seed's run (None
        where it has none).
    """

    key: str
    strategy: str
    settings: Mapping[str, Any]
    values: Mapping[str, Mapping[str, Mapping[int, float | None]]]


def compare_cells(cells: Sequence[CellValues], paired_splits: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per cell key: its statistics over seeds and its paired differences against each of its baselines.

    Returns ``{key: {"stats": {split: {statistic: mean_se}}, "baselines":
    {baseline strategy: baseline cell key}, "differences": {baseline strategy:
    {split: {statistic: difference}}}}}`` where a difference is
    :func:`~term_fl.comparison.paired.paired_difference`'s answer plus
    ``p_holm`` (None outside the family) and ``significant``. Differences are
    computed for the splits of ``paired_splits`` that both cells have.
    """
    pairs = baseline_cells([(c.key, c.strategy, c.settings) for c in cells])
    by_key = {c.key: c for c in cells}
    out: dict[str, dict[str, Any]] = {}
    for cell in cells:
        stats = {split: {stat: mean_se(by_seed.values()) for stat, by_seed in values.items()}
                 for split, values in cell.values.items()}  # fmt: skip
        differences: dict[str, dict[str, Any]] = {}
        for baseline, ref_key in pairs[cell.key].items():
            reference = by_key[ref_key].values
            differences[baseline] = {
                split: {stat: paired_difference(by_seed, reference[split].get(stat, {}))
                        for stat, by_seed in cell.values[split].items()}
                for split in paired_splits if split in cell.values and split in reference
            }  # fmt: skip
        out[cell.key] = {"stats": stats, "baselines": dict(pairs[cell.key]), "differences": differences}
    for split in paired_splits:
        _adjust(out.values(), split)
    return out


def _adjust(cells: Iterable[dict[str, Any]], split: str) -> None:
    """Holm over one table (``split``): every difference of a primary statistic gets ``p_holm``; mark them."""
    family: list[dict[str, Any]] = []
    for cell in cells:
        for by_split in cell["differences"].values():
            for stat, difference in (by_split.get(split) or {}).items():
                difference["p_holm"] = None
                difference["significant"] = False
                if stat in PRIMARY and difference["p_value"] is not None:
                    family.append(difference)
    for difference, adjusted in zip(family, holm([d["p_value"] for d in family]), strict=True):
        difference["p_holm"] = adjusted
        difference["significant"] = is_significant(adjusted, difference["n"])


def difference_columns(differences: Mapping[str, Mapping[str, Mapping[str, Mapping[str, Any]]]]) -> dict[str, Any]:
    """A cell's differences as flat CSV columns: ``SPLIT.STAT.minus_BASELINE.FIELD`` for :data:`DIFFERENCE_FIELDS`."""
    columns: dict[str, Any] = {}
    for baseline, by_split in differences.items():
        for split, by_stat in by_split.items():
            for stat, d in by_stat.items():
                ci = d["ci95"]
                values = {**d, "ci95_lo": ci[0], "ci95_hi": ci[1]}
                for field in DIFFERENCE_FIELDS:
                    columns[f"{split}.{stat}.minus_{baseline}.{field}"] = values.get(field)
    return columns


def significance_notes(pairs: Iterable[int]) -> list[str]:
    """The rule (:data:`SIGNIFICANCE`), and what the numbers of paired seeds of a table mean for its marks."""
    counts = [n for n in pairs if n]
    notes = [SIGNIFICANCE]
    if any(n < MIN_SEEDS for n in counts):
        notes.append(f"Differences over fewer than {MIN_SEEDS} seeds are never marked.")
    if MIN_SEEDS in counts:
        from scipy import special  # only where a table is described

        bar = float(special.stdtrit(MIN_SEEDS - 1, 1 - ALPHA / 2))
        notes.append(
            f"With {MIN_SEEDS} seeds a difference needs |t| > {bar:.2f} before the correction (p < {ALPHA:g} at "
            f"{MIN_SEEDS - 1} degrees of freedom) and more after it: no mark is the expected result, not evidence "
            "of no effect."
        )
    return notes
