"""A run's recorded rounds read back from the results store, as the recorder held them: for a resumed run.

A run's summary reads its last round, its last evaluated round and the
validation device mean of every evaluated round
(:func:`term_fl.runs.run.build_summary`). A run resumed after round k
(``term-fl run --resume``) has these for rounds 1..k only in the store:
:func:`recorded_history` gives them back as the :class:`RoundRecord` values
the recorder of an uninterrupted run would hold, so both summaries agree.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from term_fl.common.keys import EVAL_SPLITS, VAL
from term_fl.federation.records import RoundRecord
from term_fl.results import ResultsStore

__all__ = ["RecordedHistory", "recorded_history", "recorded_round"]


class RecordedHistory(NamedTuple):
    """What a run's recorder holds after round k."""

    last: RoundRecord | None  # round k
    last_evaluated: RoundRecord | None  # the last round up to k with statistics
    validation_means: list[tuple[int, float]]  # (round, validation device mean) of the evaluated rounds up to k


def _number(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def recorded_round(store: ResultsStore, run_id: str, server_round: int) -> RoundRecord:
    """Round ``server_round`` of a run, read back from the store (rows and statistics as they were recorded)."""
    meta = next(r for r in store.load_rounds(run_id) if r["round"] == server_round)
    train = store.load_train(run_id)
    train_rows = [
        {"partition_id": int(train["partition_id"][i]), "sampled": int(train["sampled"][i]),
         "included": int(train["included"][i]), "train_loss": _number(train["train_loss"][i]),
         "train_loss_after": _number(train["train_loss_after"][i]),
         "tilted_weight": _number(train["tilted_weight"][i]),
         "num_examples": None if math.isnan(train["num_examples"][i]) else int(train["num_examples"][i])}
        for i in range(len(train["round"])) if train["round"][i] == server_round
    ]  # fmt: skip
    eval_rows: list[dict[str, Any]] = []
    stats: dict[str, dict[str, Any]] = {}
    for split in EVAL_SPLITS:
        devices = store.load_round_devices(run_id, server_round, split)
        eval_rows += [{"partition_id": int(pid), "split": split, "loss": float(loss), "accuracy": float(accuracy),
                       "correct": int(correct), "examples": int(examples)}
                      for pid, loss, accuracy, correct, examples in zip(
                          devices["partition_id"], devices["loss"], devices["accuracy"], devices["correct"],
                          devices["examples"], strict=True)]  # fmt: skip
        row = next((r for r in store.load_round_stats(run_id, split) if r["round"] == server_round), None)
        if row is not None:
            stats[split] = {k: v for k, v in row.items() if k != "round"}
    return RoundRecord(
        server_round=server_round,
        status=meta["status"],
        train_rows=train_rows,
        eval_rows=eval_rows,
        stats=stats,
        diagnostics=meta["diagnostics"],
        duration_s=meta["duration_s"],
        excluded=meta["excluded"],
    )


def recorded_history(store: ResultsStore, run_id: str, upto: int) -> RecordedHistory:
    """The recorder's view of a run after round ``upto`` (nothing for 0)."""
    if upto < 1:
        return RecordedHistory(None, None, [])
    validation = [r for r in store.load_round_stats(run_id, VAL) if r["round"] <= upto]
    means = [(r["round"], r["mean"]) for r in validation if "mean" in r]
    evaluated = {r["round"] for split in EVAL_SPLITS for r in store.load_round_stats(run_id, split) if r["round"] <= upto}
    last = recorded_round(store, run_id, upto)
    last_evaluated = None
    if evaluated:
        newest = max(evaluated)
        last_evaluated = last if newest == upto else recorded_round(store, run_id, newest)
    return RecordedHistory(last, last_evaluated, means)
