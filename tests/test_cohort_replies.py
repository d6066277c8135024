"""Cohort-native replies: the stacked record and metric table give what the same replies as Messages give, bit for bit.

The reference is the per-message path (each reply a Message, the reply
filter, the template); the same round's replies as one
:class:`~term_fl.strategies.cohort_replies.CohortReplies` must give the same
new model (its bytes), report, aggregated metrics and exclusions, for every
registered strategy, with the defences, and with bad rows among the good.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from conftest import small_scenario
from mock_replies import mock_reply
from term_fl.common.keys import NUM_EXAMPLES, PARTITION_ID, TRAIN_LOSS_AFTER, TRAIN_LOSS_BEFORE
from term_fl.federation.loop import build_scenario_strategy
from term_fl.flower_internals import to_array_record
from term_fl.strategies import STRATEGIES
from term_fl.strategies.cohort_replies import CohortReplies, filter_cohort
from term_fl.strategies.stacked import StackedModels

SHAPES = {"linear.weight": (3, 4), "linear.bias": (3,)}
M = 9


def _cohort(seed: int, bad: bool) -> CohortReplies:
    """m replies in a shuffled partition order; with ``bad``, a NaN loss, an inf weight and a zero size."""
    rng = np.random.default_rng(seed)
    models = {k: rng.normal(size=(M, *shape)).astype(np.float32) for k, shape in SHAPES.items()}
    loss = rng.uniform(0.2, 3.0, size=M)
    sizes = rng.integers(5, 60, size=M)
    if bad:
        loss[2] = np.nan
        models["linear.weight"][4, 1, 2] = np.inf
        sizes[6] = 0
    metrics = {NUM_EXAMPLES: sizes.astype(np.int64), PARTITION_ID: rng.permutation(M).astype(np.int64),
               TRAIN_LOSS_BEFORE: loss, TRAIN_LOSS_AFTER: loss * 0.5}
    return CohortReplies(list(range(100, 100 + M)), metrics, StackedModels(models))


def _messages(cohort: CohortReplies) -> list:
    """The same replies, one Message each (metrics as the Python numbers a MetricRecord holds)."""
    columns = {key: column.tolist() for key, column in cohort.metrics.items()}
    return [mock_reply(cohort.models.model(k), {key: col[k] for key, col in columns.items()}, node)
            for k, node in enumerate(cohort.node_ids)]


def _strategy(*overrides: str, partitions: dict[int, int] | None = None):
    scenario = small_scenario("run.clients_per_round=6", f"data.num_devices={M}", *overrides)
    strategy = build_scenario_strategy(scenario, M)
    if partitions is not None:
        strategy.set_node_partitions(partitions)
    rng = np.random.default_rng(99)
    strategy.current_arrays = to_array_record({k: rng.normal(size=s).astype(np.float32) for k, s in SHAPES.items()})
    return strategy


CASES = [(f"strategy.name={name}",) for name in STRATEGIES] + [
    ("strategy.name=term", "strategy.t=2", "strategy.clip_loss=1.5", "strategy.max_update_norm=1.1"),
    ("strategy.name=term", "strategy.term.t=2", "strategy.term.server_lr=0.5"),
    ("strategy.name=qffl", "strategy.max_update_norm=1.2"),
    ("strategy.name=krum", "strategy.krum.num_to_keep=3"),
]


@pytest.mark.parametrize("bad", [False, True])
@pytest.mark.parametrize("overrides", CASES, ids=[" ".join(c).replace("strategy.", "") for c in CASES])
def test_a_round_of_stacked_replies_aggregates_as_its_messages_bit_for_bit(overrides, bad, caplog):
    cohort = _cohort(seed=len(overrides), bad=bad)
    outcomes, warnings = [], []
    for replies in (_messages(cohort), cohort):
        partitions = dict(zip(cohort.node_ids, cohort.metrics[PARTITION_ID].tolist()))
        strategy = _strategy(*overrides, partitions=partitions)  # fresh: TERM's and AFL's state starts alike
        with caplog.at_level(logging.WARNING):
            caplog.clear()
            outcomes.append(strategy.aggregate_round(3, replies))
            warnings.append([r.getMessage() for r in caplog.records if r.levelno == logging.WARNING])
    (arrays_a, metrics_a, report_a), (arrays_b, metrics_b, report_b) = outcomes
    assert {k: arrays_a[k].data for k in arrays_a} == {k: arrays_b[k].data for k in arrays_b}
    assert repr(dict(metrics_a)) == repr(dict(metrics_b))  # repr: every digit, and NaN equals NaN
    assert (report_a.partition_ids, report_a.node_ids, repr(report_a.metrics)) == (
        report_b.partition_ids, report_b.node_ids, repr(report_b.metrics))
    for field in ("losses", "num_examples", "weights"):
        assert np.array_equal(getattr(report_a, field), getattr(report_b, field), equal_nan=True), field
    assert report_a.excluded == report_b.excluded and warnings[0] == warnings[1]
    assert len(report_b.excluded) == (2 + strategy.needs_loss if bad else 0)  # a NaN F_k counts where F_k does
    assert report_a.diagnostics.keys() == report_b.diagnostics.keys()
    for key, value in report_a.diagnostics.items():
        assert np.array_equal(np.asarray(value), np.asarray(report_b.diagnostics[key]), equal_nan=True), key


def test_stacked_evaluation_replies_report_as_their_messages():
    rng = np.random.default_rng(5)
    metrics = {PARTITION_ID: np.array([3, 0, 2, 1], dtype=np.int64), "val_loss": rng.uniform(size=4),
               "val_accuracy": np.array([0.5, np.nan, 0.25, 1.0]), NUM_EXAMPLES: np.array([4, 8, 0, 2], dtype=np.int64)}
    cohort = CohortReplies([11, 12, 13, 14], metrics)
    messages = [mock_reply({}, {k: v.tolist()[i] for k, v in metrics.items()}, node)
                for i, node in enumerate(cohort.node_ids)]
    reports = [_strategy().evaluation_report(2, replies, required_metrics=("val_loss", "val_accuracy"))
               for replies in (messages, cohort)]
    assert reports[0] == reports[1]
    assert reports[1].partition_ids == [1, 3] and [e.partition_id for e in reports[1].excluded] == [0, 2]


def test_valid_rows_keep_their_stack_and_follow_the_global_models_key_order():
    cohort = _cohort(seed=1, bad=False)
    sorted_cohort = CohortReplies(cohort.node_ids, {**cohort.metrics, PARTITION_ID: np.arange(M)}, cohort.models)
    kept = filter_cohort(sorted_cohort, required_metrics=(NUM_EXAMPLES,))
    assert kept.models is sorted_cohort.models  # nothing excluded or moved: the stack itself, no copy
    reference = to_array_record({k: np.zeros(SHAPES[k], np.float32) for k in reversed(SHAPES)})
    reordered = filter_cohort(sorted_cohort, required_metrics=(NUM_EXAMPLES,), reference_arrays=reference)
    assert list(reordered.models.arrays) == list(reversed(SHAPES))


def test_a_table_whose_columns_do_not_fit_its_clients_is_refused():
    with pytest.raises(ValueError, match="CohortReplies of 2 clients needs columns"):
        CohortReplies([1, 2], {NUM_EXAMPLES: np.array([1, 2, 3])})
