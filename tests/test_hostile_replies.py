"""One hostile reply among honest ones, the strategies used directly as a Flower app does (issue 22, findings 1-4).

Each case is one lie (a loss, a size, a replayed or foreign reply, huge
weights) among m honest replies; the expected weights come from naive
implementations typed here (statistics.median, math.exp), and each test
states the most weight the liar can get under the defence that covers it.
Without the defence the same lie takes the round (the 'undefended' cases
record what the issue found).
"""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord
from flwr.serverapp.exception import AggregationError

from mock_replies import mock_reply
from term_fl.maths.loss_transforms import MAD_SCALE, ranks
from term_fl.strategies import AFL, QFFL, FedAvg, FedAvgUniform, FedMedian, FedTrimmedAvg, Krum, TermFedAvg

M = 6  # honest replies
LIAR = 0  # the index (and partition) of the lying reply
W0 = {"w": np.zeros(4, dtype=np.float64)}


def honest_losses(m: int = M) -> list[float]:
    return [0.5 + 0.05 * k for k in range(m)]


def update(k: int) -> dict[str, np.ndarray]:
    return {"w": np.array([0.1 * (k + 1), -0.05 * k, 0.02, 0.3], dtype=np.float64)}


def replies(lie: dict | None = None, m: int = M, models: dict[int, dict] | None = None, sizes=None):
    """m replies from nodes 10+k, partition k, 20 examples each (or ``sizes``); reply LIAR's metrics changed by ``lie``."""
    out = []
    for k, loss in enumerate(honest_losses(m)):
        metrics = {"num-examples": 20 if sizes is None else sizes[k], "partition-id": k, "train_loss_before": loss}
        if k == LIAR and lie:
            metrics.update(lie)
        out.append(mock_reply((models or {}).get(k, update(k)), metrics, 10 + k))
    return out


def run(strategy, messages, table: bool = True, m: int = M):
    strategy.current_arrays = ArrayRecord({k: Array(v) for k, v in W0.items()})
    if table:
        strategy.set_node_partitions({10 + k: k for k in range(m)})
    arrays, _ = strategy.aggregate_train(1, messages)
    return arrays, strategy.last_round


def weight_of(report, partition: int = LIAR) -> float:
    return float(report.weights[report.partition_ids.index(partition)]) if partition in report.partition_ids else 0.0


# --- naive references -----------------------------------------------------------


def median_mad_scores(losses: list[float], c: float) -> list[float]:
    med = statistics.median(losses)
    sigma = MAD_SCALE * statistics.median([abs(x - med) for x in losses])
    return [max(-c, min(c, (x - med) / sigma)) for x in losses]


def tilted(values: list[float], sizes: list[float], t: float) -> list[float]:
    top = max(t * v for v in values)
    raw = [n * math.exp(t * v - top) for n, v in zip(sizes, values, strict=True)]
    return [r / sum(raw) for r in raw]


# --- finding 1: a lying loss ---------------------------------------------------


@pytest.mark.parametrize("lie", [-1e300, 0.0, -5.0, 1e300])
def test_term_robust_mode_by_default_gives_a_lying_loss_at_most_a_median_clients_weight(lie):
    arrays, report = run(TermFedAvg(t=-2.0), replies({"train_loss_before": lie}))
    losses = [lie, *honest_losses()[1:]]
    scores = median_mad_scores(losses, 3.0)
    floor = statistics.median(scores)
    expected = tilted([max(s, floor) for s in scores], [20] * M, -2.0)
    np.testing.assert_allclose(report.weights, expected, rtol=1e-12)
    # the bound: ceil(m/2) - 1 honest clients at or below the median weigh as much as the liar can
    assert weight_of(report) <= 1 / math.ceil(M / 2) + 1e-12
    assert arrays is not None and np.all(report.weights[1:] > 0)  # the round goes on with the honest ones
    assert report.losses[0] == lie  # the report keeps what the client said


@pytest.mark.parametrize("lie", [-1e300, 0.0])
def test_term_robust_mode_undefended_gives_the_round_to_the_lowest_reported_loss(lie):
    _, report = run(TermFedAvg(t=-2.0, loss_transform="none"), replies({"train_loss_before": lie}))
    assert weight_of(report) > 0.25 if lie == 0.0 else weight_of(report) == 1.0  # issue 22, finding 1


def test_term_fairness_mode_with_median_mad_bounds_a_huge_loss():
    t, c = 1.0, 3.0
    _, report = run(TermFedAvg(t=t, loss_transform="median_mad", loss_clip=c), replies({"train_loss_before": 1e300}))
    losses = [1e300, *honest_losses()[1:]]
    np.testing.assert_allclose(report.weights, tilted(median_mad_scores(losses, c), [20] * M, t), rtol=1e-12)
    # the bound: at most exp(t c) over the ceil(m/2) - 1 honest clients at or above the median
    bound = math.exp(t * c) / (math.exp(t * c) + math.ceil(M / 2) - 1)
    assert weight_of(report) <= bound and weight_of(report) < 0.9
    _, undefended = run(TermFedAvg(t=t), replies({"train_loss_before": 1e300}))
    assert weight_of(undefended) == 1.0


def test_term_rank_transform_gives_the_top_rank_its_share_whatever_the_loss():
    _, report = run(TermFedAvg(t=1.0, loss_transform="rank"), replies({"train_loss_before": 1e300}))
    expected = tilted(list(ranks([1e300, *honest_losses()[1:]])), [20] * M, 1.0)
    np.testing.assert_allclose(report.weights, expected, rtol=1e-12)
    assert weight_of(report) == pytest.approx(math.exp(1.0) / sum(math.exp(i / M) for i in range(1, M + 1)))


def test_term_weights_do_not_change_when_every_loss_moves_by_a_constant_negative_ones_included():
    shifted = {k: mock_reply(update(k), {"num-examples": 20, "partition-id": k,
                                          "train_loss_before": loss - 10.0}, 10 + k)
               for k, loss in enumerate(honest_losses())}
    for transform in ("none", "median_mad", "rank"):
        _, plain = run(TermFedAvg(t=2.0, loss_transform=transform), replies())
        _, negative = run(TermFedAvg(t=2.0, loss_transform=transform), list(shifted.values()))
        np.testing.assert_allclose(negative.weights, plain.weights, rtol=1e-9)
        assert negative.excluded == []  # TERM takes negative losses


def test_clip_loss_leaves_a_round_of_negative_losses_alone_with_a_warning(caplog):
    negative = [mock_reply(update(k), {"num-examples": 20, "partition-id": k, "train_loss_before": -5.0 + 0.1 * k},
                           10 + k) for k in range(M)]
    _, clipped = run(TermFedAvg(t=1.0, clip_loss=2.0), negative)
    _, plain = run(TermFedAvg(t=1.0), negative)
    np.testing.assert_array_equal(clipped.weights, plain.weights)  # not uniform
    assert "median -4.75 is not positive" in caplog.text


def test_qffl_with_median_mad_bounds_a_huge_loss_and_rejects_a_negative_one():
    c, q, lr = 3.0, 1.0, 0.1
    arrays, report = run(QFFL(lr, q, loss_transform="median_mad", loss_clip=c), replies({"train_loss_before": 1e300}))
    losses = [1e300, *honest_losses()[1:]]
    med = statistics.median(losses)
    bounded = [min(x, med + c * MAD_SCALE * statistics.median([abs(y - med) for y in losses])) for x in losses]
    lipschitz = 1 / lr
    distances = [sum(float(np.sum(v ** 2)) for v in update(k).values()) for k in range(M)]
    h = [q * (f + 1e-10) ** (q - 1) * lipschitz**2 * d + lipschitz * (f + 1e-10) ** q
         for f, d in zip(bounded, distances, strict=True)]
    expected = [lipschitz * (f + 1e-10) ** q / sum(h) for f in bounded]
    np.testing.assert_allclose(report.weights, expected, rtol=1e-12)
    assert arrays is not None and weight_of(report) < 0.5
    _, undefended = run(QFFL(lr, q), replies({"train_loss_before": 1e300}))
    assert weight_of(undefended) > 0.999
    _, negative = run(QFFL(lr, q), replies({"train_loss_before": -1.0}))
    assert [(e.partition_id, "must be >= 0" in e.reason) for e in negative.excluded] == [(LIAR, True)]


NON_FINITE = [math.nan, math.inf, -math.inf]
STRATEGY_FACTORIES = {  # each with the template's keywords (the defences)
    "fedavg": FedAvg, "fedavg_uniform": FedAvgUniform, "term t<0": lambda **kw: TermFedAvg(t=-2.0, **kw),
    "term t>0": lambda **kw: TermFedAvg(t=1.0, **kw), "qffl": lambda **kw: QFFL(0.1, 1.0, **kw), "afl": AFL,
    "median": FedMedian, "trimmed_mean": lambda **kw: FedTrimmedAvg(beta=0.2, **kw), "krum": Krum,
}


@pytest.mark.parametrize("value", NON_FINITE, ids=str)
@pytest.mark.parametrize("name", sorted(STRATEGY_FACTORIES))
def test_every_strategy_excludes_a_non_finite_size_and_those_that_read_it_a_non_finite_loss(name, value):
    strategy = STRATEGY_FACTORIES[name]()
    for key in ("num-examples", "train_loss_before"):
        arrays, report = run(strategy, replies({key: value}))
        reads = key == "num-examples" or strategy.needs_loss
        assert arrays is not None and (LIAR not in report.partition_ids) == reads, (key, report.partition_ids)
        if reads:
            assert "not finite" in report.excluded[0].reason


# --- finding 2: a lying size ---------------------------------------------------


# the most weight with max_size_ratio r = 3 and equal honest sizes: r / (r + the honest clients that weigh
# as much as the liar can): every other client for FedAvg, the ceil(m/2) - 1 at or below the median for TERM t < 0
SIZE_BOUNDS = {"fedavg": 3 / (3 + M - 1), "term t<0": 3 / (3 + math.ceil(M / 2) - 1), "term t>0": None}


@pytest.mark.parametrize("name", sorted(SIZE_BOUNDS))
def test_a_huge_reported_size_takes_the_round_undefended_and_at_most_r_median_clients_with_max_size_ratio(name):
    lie = {"num-examples": 1e300}
    _, undefended = run(STRATEGY_FACTORIES[name](), replies(lie))
    assert weight_of(undefended) > 0.999  # issue 22, finding 2
    arrays, report = run(STRATEGY_FACTORIES[name](max_size_ratio=3.0), replies(lie))
    np.testing.assert_array_equal(report.num_examples, [1e300, *[20] * (M - 1)])  # as reported
    if name == "fedavg":  # n_liar counts as 3 x median = 60 among five 20s
        np.testing.assert_allclose(report.weights, [60 / 160, *[20 / 160] * (M - 1)], rtol=1e-12)
    bound = SIZE_BOUNDS[name]
    assert arrays is not None and (bound is None or weight_of(report) <= bound + 1e-12)
    assert weight_of(report) < 0.7


def test_a_size_other_than_the_partitions_training_size_is_excluded_where_the_server_knows_it(caplog):
    strategy = FedAvg()
    strategy.set_partition_sizes({k: 20 for k in range(M)})
    arrays, report = run(strategy, replies({"num-examples": 1e300}))
    assert arrays is not None and report.partition_ids == list(range(1, M))
    assert report.excluded[0].reason == "reports num-examples = 1e+300, but partition 0 has 20 training examples"
    assert "excluding reply from node 10 (partition 0): reports num-examples" in caplog.text


# --- finding 3: one reply per node and partition ---------------------------------


@pytest.mark.parametrize("name", ["fedavg", "term t>0", "term t<0", "qffl"])
def test_a_reply_delivered_three_times_counts_once(name, caplog):
    messages = replies()
    _, once = run(STRATEGY_FACTORIES[name](), messages)
    arrays, thrice = run(STRATEGY_FACTORIES[name](), [*messages, messages[LIAR], messages[LIAR]])
    np.testing.assert_array_equal(thrice.weights, once.weights)
    assert [e.reason for e in thrice.excluded] == [
        "a second reply from node 10 this round (one reply per node: the first is kept)"] * 2
    assert caplog.text.count("excluding reply from node 10 (partition 0): a second reply") == 2


def test_two_nodes_claiming_one_partition_are_both_excluded_without_a_table():
    messages = [*replies(), mock_reply(update(9), {"num-examples": 20, "partition-id": 2, "train_loss_before": 0.1},
                                       99)]
    arrays, report = run(FedAvg(), messages, table=False)
    assert arrays is not None and report.partition_ids == [0, 1, 3, 4, 5]
    assert {e.node_id for e in report.excluded} == {12, 99}
    assert "partition 2 is claimed by nodes 12, 99" in report.excluded[0].reason


def test_with_the_table_a_node_cannot_speak_for_another_nodes_partition():
    impostor = mock_reply(update(9), {"num-examples": 20, "partition-id": 2, "train_loss_before": 0.1}, 99)
    liar = replies({"partition-id": 3})  # node 10 holds partition 0
    _, report = run(FedAvg(), [*liar[1:], liar[0], impostor])
    assert report.partition_ids == [1, 2, 3, 4, 5] and report.node_ids == [11, 12, 13, 14, 15]
    reasons = {e.node_id: e.reason for e in report.excluded}
    assert reasons == {10: "reports partition-id 3, but node 10 holds partition 0",
                       99: "reports partition-id 2, which node 12 holds"}


def test_afl_excludes_a_reply_without_partition_id_and_stops_when_no_reply_carries_one():
    arrays, report = run(AFL(), replies({"partition-id": 2.5}))
    assert arrays is not None and LIAR not in report.partition_ids and len(report.node_ids) == M - 1
    bare = [mock_reply(update(k), {"num-examples": 20, "train_loss_before": 0.5}, 10 + k) for k in range(M)]
    with pytest.raises(AggregationError, match=r"(?s)'partition-id'.*node_partitions\(grid"):
        run(AFL(), bare)


# --- finding 4: q-FFL and one reply of float32-max weights ------------------------


def test_qffl_leaves_out_a_huge_update_and_aggregates_the_honest_ones(caplog):
    huge = {"w": np.full(4, np.finfo(np.float32).max, dtype=np.float64)}
    arrays, report = run(QFFL(0.1, 1.0), replies(models={LIAR: huge}))
    honest = [mock_reply(update(k), {"num-examples": 20, "partition-id": k - 1, "train_loss_before": loss}, 10 + k)
              for k, loss in enumerate(honest_losses()) if k != LIAR]
    strategy = QFFL(0.1, 1.0)
    strategy.current_arrays = ArrayRecord({k: Array(v) for k, v in W0.items()})
    expected_arrays, _ = strategy.aggregate_train(1, honest)
    np.testing.assert_array_equal(report.weights[1:], strategy.last_round.weights)
    assert report.weights[0] == 0.0 and np.sum(report.weights) > 0.1  # not every coefficient zeroed
    np.testing.assert_array_equal(arrays["w"].numpy(), expected_arrays["w"].numpy())
    assert "more than 1e+06 times the round's median: left out of this round" in caplog.text
