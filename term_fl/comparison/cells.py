"""Cells of a comparison: which runs count, how a cell is named, and its statistics over seeds.

Pure functions over plain values (no store, no I/O). A *cell* is a set of
runs whose comparable settings are the same (one ``config_hash``); its runs
differ by seed. The rules a reader can rely on:

- **One run per seed.** A seed that ran twice in a cell is a repeat, not a
  new sample (the engines are deterministic): the cell counts it once, with
  its latest finished run (else its latest run), and says which runs it left
  out. ``n`` is the number of distinct seeds.
- **Named by what differs.** A cell is labelled by its strategy and the
  strategy's tuned parameter ("term t=20"), plus every setting in which the
  compared cells differ ("fedavg rounds=5"): never by a hash.
- **Never pooled silently.** Cells whose settings differ beyond the strategy
  are kept apart and the differing settings are named (:func:`varying_settings`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

# their home in 0.2 (term_fl.comparison_cells); now term_fl.comparison.paired's, re-exported here until 0.4
from term_fl.comparison.paired import mean_se, paired_difference  # noqa: F401

IGNORED_SETTINGS = (
    "name", "description", "sweep", "selection", "resources", "run.seed", "run.name", "run.engine",
    "run.node_timeout", "run.round_timeout", "run.max_failed_rounds", "run.reference", "data.seed", "data.path",
    "data.sha256",
)  # fmt: skip
"""Settings that do not make two runs different experiments: those config_hash leaves out (where a run
executes, how long it waits, which reference runs beside it, seeds and names; the vehicle data counts by its
content there)."""


def strategy_side(key: str) -> bool:
    """Whether a dotted setting belongs to the strategy: ``strategy.*`` and the client-side tilt ``client.tau``."""
    return key.startswith("strategy.") or key == "client.tau"


def counted_runs(runs: Sequence[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], dict[int, list[str]]]:
    """The runs a cell counts (one per seed) and, per repeated seed, the run ids left out.

    Each run needs ``run_id``, ``seed``, ``status`` and ``started_at``. Per
    seed the latest finished run counts, else the latest run of any status.
    Counted runs come in seed order.
    """
    by_seed: dict[int, list[Mapping[str, Any]]] = {}
    for run in runs:
        by_seed.setdefault(run["seed"], []).append(run)
    counted, repeats = [], {}
    for seed in sorted(by_seed):
        group = sorted(by_seed[seed], key=lambda r: (r["status"] == "finished", r["started_at"], r["run_id"]))
        counted.append(group[-1])
        if len(group) > 1:
            repeats[seed] = [r["run_id"] for r in group[:-1]]
    return counted, repeats


def flat_settings(config: Mapping[str, Any], strategy_params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A run's comparable settings as dotted keys (``run.rounds``, ``strategy.t`` ...).

    The strategy section is the strategy's name and the parameters it uses
    (``strategy_params``, as stored with the run), not every field of the
    schema; :data:`IGNORED_SETTINGS` are left out.
    """
    flat: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, Mapping) and value:
            for key, item in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), item)
        else:
            flat[prefix] = value

    config = dict(config)
    strategy = config.pop("strategy", None) or {}
    walk("", config)
    flat["strategy.name"] = strategy.get("name") if isinstance(strategy, Mapping) else strategy
    for key, value in (strategy_params if strategy_params is not None else strategy).items():
        if key != "name":
            flat[f"strategy.{key}"] = value
    return {k: v for k, v in flat.items() if not any(k == i or k.startswith(i + ".") for i in IGNORED_SETTINGS)}


def varying_settings(settings: Iterable[Mapping[str, Any]]) -> list[str]:
    """The dotted keys whose value is not the same in every one of ``settings`` (missing counts as a value)."""
    settings = list(settings)
    keys = sorted({k for s in settings for k in s})
    return [k for k in keys if len({_hashable(s.get(k, _MISSING)) for s in settings}) > 1]


_MISSING = "<unset>"


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, Mapping):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


def settings_key(settings: Mapping[str, Any], skip: Callable[[str], bool] = lambda key: False) -> tuple[Any, ...]:
    """The settings (but the keys ``skip`` says to leave out) as one hashable value: equal settings, equal keys."""
    return tuple(sorted((k, _hashable(v)) for k, v in settings.items() if not skip(k)))


def short_names(keys: Sequence[str]) -> dict[str, str]:
    """Each dotted key by its last part (``rounds``), or by more parts where two keys would read the same."""
    names = {}
    for key in keys:
        parts = key.split(".")
        depth = 1
        while depth < len(parts) and sum(k.split(".")[-depth:] == parts[-depth:] for k in keys) > 1:
            depth += 1
        names[key] = ".".join(parts[-depth:])
    return names


def format_value(value: Any) -> str:
    """A setting as a user wrote it: ``20``, ``0.5``, ``1e-05``, ``vehicle``, ``[0.5, 0.2, 0.3]``."""
    if isinstance(value, bool) or value is None:
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    return str(value)


def cell_labels(
    base_labels: Sequence[str], settings: Sequence[Mapping[str, Any]], *, strategies: Sequence[str]
) -> tuple[list[str], list[str]]:
    """Labels that tell the cells apart by what differs, and the settings (outside the strategy) that vary.

    ``base_labels[i]`` names cell i by its strategy and tuned parameter
    ("term t=20"). Every setting outside the strategy section that varies
    across the cells is appended to every label ("rounds=5"); a strategy
    parameter that varies among cells of the same strategy but is not in the
    base label (e.g. ``lam``) is appended to those cells' labels. The
    strategy's side includes the client-side tilt ``client.tau`` (:func:`strategy_side`).
    """
    varying = varying_settings(settings)
    outside = [k for k in varying if not strategy_side(k)]
    inside: dict[int, list[str]] = {}
    for strategy in set(strategies):
        members = [i for i, s in enumerate(strategies) if s == strategy]
        keys = [k for k in varying_settings([settings[i] for i in members]) if strategy_side(k)]
        for i in members:
            words = base_labels[i].split()
            inside[i] = [k for k in keys if not any(w.startswith(k.split(".")[-1] + "=") for w in words)]
    names = short_names(sorted({*outside, *(k for keys in inside.values() for k in keys)}))
    labels = []
    for i, base in enumerate(base_labels):
        extra = [f"{names[k]}={format_value(settings[i].get(k, _MISSING))}" for k in inside.get(i, []) + outside]
        labels.append(" ".join([base, *extra]))
    return labels, outside


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def curve(rounds: Sequence[int], n: Sequence[int], total: Sequence[float], total_sq: Sequence[float]) -> dict[str, list[Any]]:
    """Per round, mean ± standard error over runs of one statistic, from its count, sum and sum of squares.

    mean = sum / n; sample variance = (sum of squares - n mean^2) / (n - 1)
    (never below 0); standard error = sqrt(variance / n), None for n < 2.
    Plain JSON values: a non-finite mean or error is None.
    Rounds without a value (n = 0) are left out; ``n`` says how many runs a
    round averages (fewer while a run is running or was not evaluated).
    """
    count = np.asarray(n, dtype=np.float64)
    keep = count > 0
    count = count[keep]
    s, sq = np.asarray(total, dtype=np.float64)[keep], np.asarray(total_sq, dtype=np.float64)[keep]
    mean = s / count
    with np.errstate(invalid="ignore", divide="ignore"):
        variance = np.maximum(sq - count * mean**2, 0.0) / (count - 1)
        se = np.sqrt(variance / count)
    finite_se = np.isfinite(se) & (count >= 2)
    return {
        "round": np.asarray(rounds, dtype=np.int64)[keep].tolist(),
        "mean": _none_where_not(mean, np.isfinite(mean)),
        "se": _none_where_not(se, finite_se),
        "n": count.astype(np.int64).tolist(),
    }


def _none_where_not(values: np.ndarray, keep: np.ndarray) -> list[float | None]:
    """``values`` as a list of floats, None where ``keep`` is False."""
    out = values.tolist()
    if not keep.all():
        for i in np.flatnonzero(~keep).tolist():
            out[i] = None
    return out


def ahead_from(
    cell: Mapping[str, Sequence[Any]], reference: Mapping[str, Sequence[Any]], *, higher_is_better: bool = True
) -> int | None:
    """The first round from which the cell's mean curve stays strictly better than the reference's.

    Only rounds where both curves have a value count. None when the cell is
    not better in the last such round (or there is none).
    """
    ref = {r: m for r, m in zip(reference["round"], reference["mean"], strict=True) if m is not None}
    common = [(r, m, ref[r]) for r, m in zip(cell["round"], cell["mean"], strict=True) if m is not None and r in ref]
    first = None
    for r, mine, theirs in reversed(common):
        if (mine > theirs) if higher_is_better else (mine < theirs):
            first = r
        else:
            break
    return first


def ecdf(values: Iterable[float | None]) -> dict[str, list[float]]:
    """The empirical CDF of the finite values: sorted ``x`` and ``y`` = fraction of values <= x."""
    x = np.sort(np.asarray([v for v in values if _finite(v)], dtype=np.float64))
    return {"x": x.tolist(), "y": (np.arange(1, x.size + 1) / max(x.size, 1)).tolist()}
