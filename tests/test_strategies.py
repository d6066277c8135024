"""term_fl.strategies on hand-built Flower Messages (no simulation).

Expected numbers are computed independently in the tests: by Flower's own
FedAvg / QFedAvg, or by the paper's formulas typed directly with numpy.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import numpy as np
import pytest
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Error,
    Message,
    MessageType,
    Metadata,
    MetricRecord,
    RecordDict,
)
from flwr.serverapp.exception import AggregationError
from flwr.serverapp.strategy import FedAvg as FlowerFedAvg
from flwr.serverapp.strategy import QFedAvg as FlowerQFedAvg
from flwr.supercore.task_identity import TaskIdentity

from term_fl.strategies import (
    AFL,
    QFFL,
    STRATEGIES,
    FedAvg,
    TrainReport,
    TermFedAvg,
    afl_round,
    build_strategy,
    project_onto_simplex,
)
from term_fl.flower_internals import records_of
from term_fl.strategies.fedavg import RoundInputs
from term_fl.strategies.stacked import StackedModels

SHAPES = {"layer.weight": (3, 4), "layer.bias": (3,)}


@pytest.fixture(autouse=True)
def server_identity(monkeypatch):
    """Instruction Messages read the run / node / task id of the running ServerApp."""
    monkeypatch.setattr(TaskIdentity, "_run_id", 1)
    monkeypatch.setattr(TaskIdentity, "_node_id", 0)
    monkeypatch.setattr(TaskIdentity, "_task_id", 1)


# --- helpers ----------------------------------------------------------------


def metadata(node_id: int, message_type: str = MessageType.TRAIN) -> Metadata:
    return Metadata(
        run_id=1,
        message_id=f"reply-{node_id}",
        src_node_id=node_id,
        dst_node_id=0,
        reply_to_message_id=f"instruction-{node_id}",
        group_id="1",
        created_at=time.time(),
        ttl=3600.0,
        message_type=message_type,
    )


def model(seed: int, scale: float = 1.0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: (scale * rng.normal(size=s)).astype(np.float32) for k, s in SHAPES.items()}


def train_reply(node_id: int, arrays: dict[str, np.ndarray] | None, **metrics) -> Message:
    records = {"metrics": MetricRecord(metrics)}
    if arrays is not None:
        records["arrays"] = ArrayRecord({k: Array(v) for k, v in arrays.items()})
    return Message(metadata=metadata(node_id), content=RecordDict(records))


def error_reply(node_id: int) -> Message:
    return Message(metadata=metadata(node_id), error=Error(code=3, reason="client crashed"))


def global_record(seed: int = 100) -> ArrayRecord:
    return ArrayRecord({k: Array(v) for k, v in model(seed).items()})


CLIENTS = [  # node id, partition id, num-examples, train_loss_before, train_loss_before_sum
    (9001, 4, 30, 0.9, 27.0),
    (17, 0, 10, 0.3, 3.0),
    (555, 2, 25, 2.1, 52.5),
    (42, 1, 5, 1.4, 7.0),
]


def replies(clients=CLIENTS, seed_offset: int = 0) -> list[Message]:
    return [
        train_reply(
            node,
            model(part + seed_offset),
            **{"num-examples": n, "partition-id": part, "train_loss_before": loss,
               "train_loss_before_sum": loss_sum},
        )
        for node, part, n, loss, loss_sum in clients
    ]


def by_partition(clients=CLIENTS):
    return sorted(clients, key=lambda c: c[1])


def decode(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in record.items()}


def ready(strategy: FedAvg, server_round: int = 1, arrays: ArrayRecord | None = None, clients=CLIENTS):
    """Run configure_train on a fake grid of ``clients`` so the strategy holds the global model."""
    grid = FakeGrid([c[0] for c in clients])
    strategy.set_node_partitions({c[0]: c[1] for c in clients})
    list(strategy.configure_train(server_round, arrays or global_record(), ConfigRecord(), grid))
    return strategy


class FakeGrid:
    """The part of flwr.serverapp.Grid that configure_* uses."""

    def __init__(self, node_ids):
        self.node_ids = list(node_ids)

    def get_node_ids(self):
        return list(self.node_ids)


def all_strategies():
    return [
        FedAvg(),
        QFFL(client_learning_rate=0.1, q=1.0),
        TermFedAvg(t=1.0),
        AFL(lambda_lr=0.1),
    ]


# --- FedAvg equivalence -----------------------------------------------------


@pytest.mark.parametrize("make", [FedAvg, lambda: TermFedAvg(t=0.0)])
def test_t_zero_with_num_examples_weights_equals_flower_fedavg(make):
    ours = ready(make())
    arrays, metrics = ours.aggregate_train(1, replies())
    flower_arrays, flower_metrics = FlowerFedAvg().aggregate_train(1, replies())
    for key in SHAPES:
        np.testing.assert_allclose(arrays[key].numpy(), flower_arrays[key].numpy(),
                                   rtol=0, atol=1e-6)
    assert dict(metrics) == pytest.approx(dict(flower_metrics), rel=1e-12)
    n = np.array([c[2] for c in by_partition()], dtype=float)
    np.testing.assert_allclose(ours.last_round.weights, n / n.sum(), rtol=1e-15)


def round_inputs(losses, num_examples):
    return RoundInputs(server_round=1, partition_ids=np.arange(len(losses)), losses=np.asarray(losses, float),
                       num_examples=np.asarray(num_examples, float), global_model=lambda: model(100),
                       models=StackedModels.stack([model(k) for k in range(len(losses))]))


@pytest.mark.parametrize("lam", [1.0, 0.5])
def test_at_t_zero_the_old_model_has_no_share_even_when_the_float_weights_miss_one(lam):
    sizes = [430, 558, 520, 548, 142, 441, 431, 10, 81, 267]
    n = np.array(sizes, dtype=float)
    assert np.sum(n / n.sum()) != 1.0  # the float sum of n_k / N is 1 - 1.1e-16 here
    losses = 0.1 * np.arange(1, 11)
    expected, _ = FedAvg().round_step(round_inputs(losses, n), None)
    got, _ = TermFedAvg(t=0.0, lam=lam).round_step(round_inputs(losses, n), 0.7 if lam < 1 else None)
    assert got.global_coefficient == 0.0 == expected.global_coefficient
    assert np.array_equal(got.coefficients, expected.coefficients)
    clients = [(1000 + i, i, size, loss, loss * size) for i, (size, loss) in enumerate(zip(sizes, losses))]
    arrays = []
    for strategy in (FedAvg(), TermFedAvg(t=0.0, lam=lam)):
        strategy.set_node_partitions({c[0]: c[1] for c in clients})
        list(strategy.configure_train(1, global_record(), ConfigRecord(), FakeGrid([c[0] for c in clients])))
        arrays.append(strategy.aggregate_train(1, replies(clients))[0])
    assert all(np.array_equal(arrays[0][k].numpy(), arrays[1][k].numpy()) for k in SHAPES)


@pytest.mark.parametrize("t", [-3.0, 0.0, 2.0])
def test_term_with_a_server_learning_rate_keeps_exactly_one_minus_it_of_the_old_model(t):
    strategy = TermFedAvg(t=t, server_learning_rate=0.25)
    aggregation, _ = strategy.round_step(round_inputs([0.3, 1.4, 2.1], [10, 5, 25]), None)
    aggregation = aggregation.stepped(strategy.server_learning_rate)  # as FedAvg's aggregate_train takes it
    assert aggregation.global_coefficient == 0.75
    assert aggregation.coefficients.sum() == pytest.approx(0.25, abs=1e-15)


def test_with_a_running_estimate_the_old_model_takes_what_the_weights_leave():
    aggregation, _ = TermFedAvg(t=2.0, lam=0.5).round_step(round_inputs([0.3, 1.4, 2.1], [10, 5, 25]), 0.2)
    assert aggregation.coefficients.sum() != pytest.approx(1.0)  # lam < 1: the p_k need not sum to 1
    assert aggregation.global_coefficient == 1.0 - float(np.sum(aggregation.coefficients))


def test_output_keeps_the_global_models_keys_and_float32_dtype():
    for strategy in all_strategies():
        arrays, _ = ready(strategy).aggregate_train(1, replies())
        assert list(arrays.keys()) == list(global_record().keys())
        assert all(a.numpy().dtype == np.float32 for a in arrays.values())
        assert all(tuple(a.shape) == SHAPES[k] for k, a in arrays.items())


# --- TERM ---------------------------------------------------------------------


def test_term_weights_equal_the_exp_formula_by_hand():
    t = 1.5
    strategy = ready(TermFedAvg(t=t))
    arrays, _ = strategy.aggregate_train(1, replies())
    clients = by_partition()
    n = np.array([c[2] for c in clients], dtype=float)
    f = np.array([c[3] for c in clients])
    p = n * np.exp(t * f) / np.sum(n * np.exp(t * f))
    np.testing.assert_allclose(strategy.last_round.weights, p, rtol=1e-12)
    expected = {k: sum(pk * model(c[1])[k].astype(float) for pk, c in zip(p, clients))
                for k in SHAPES}
    for key in SHAPES:
        np.testing.assert_allclose(arrays[key].numpy(), expected[key], rtol=0, atol=1e-6)


@pytest.mark.parametrize("t", [-50.0, -1.0, 0.0, 0.5, 3.0, 80.0])
def test_term_weights_sum_to_one_with_lam_one(t):
    strategy = ready(TermFedAvg(t=t, lam=1.0))
    strategy.aggregate_train(1, replies())
    assert strategy.last_round.weights.sum() == pytest.approx(1.0, abs=1e-12)
    assert strategy.running_estimate == strategy.last_round.diagnostics["running_estimate"]


def test_term_uniform_base_weights_ignore_num_examples():
    t = 0.7
    strategy = ready(TermFedAvg(t=t, base_weighting="uniform"))
    strategy.aggregate_train(1, replies())
    f = np.array([c[3] for c in by_partition()])
    np.testing.assert_allclose(strategy.last_round.weights, np.exp(t * f) / np.exp(t * f).sum(),
                               rtol=1e-12)


def test_term_sum_reduction_tilts_the_summed_losses():
    t = 0.05
    strategy = ready(TermFedAvg(t=t, loss_reduction="sum"))
    assert strategy.train_loss_key == "train_loss_before_sum"
    strategy.aggregate_train(1, replies())
    clients = by_partition()
    n = np.array([c[2] for c in clients], dtype=float)
    f = np.array([c[4] for c in clients])
    np.testing.assert_array_equal(strategy.last_round.losses, f)
    np.testing.assert_allclose(strategy.last_round.weights,
                               n * np.exp(t * f) / np.sum(n * np.exp(t * f)), rtol=1e-12)


def test_running_estimate_with_lam_below_one_matches_naive_recomputation_over_two_rounds():
    t, lam, eta = 0.8, 0.5, 0.7
    strategy = TermFedAvg(t=t, lam=lam, server_learning_rate=eta)
    round1 = CLIENTS[:3]
    round2 = [(17, 0, 10, 0.2, 2.0), (42, 1, 5, 2.5, 12.5), (9001, 4, 30, 1.1, 33.0)]
    w1, w2 = global_record(100), global_record(200)

    ready(strategy, 1, w1).aggregate_train(1, replies(round1))
    ready(strategy, 2, w2)
    arrays, _ = strategy.aggregate_train(2, replies(round2))

    def batch(clients):
        n = np.array([c[2] for c in clients], float)
        f = np.array([c[3] for c in clients])
        a = n / n.sum()
        return a, f, math.log(np.sum(a * np.exp(t * f))) / t

    _, _, rs1 = batch(by_partition(round1))
    a2, f2, rs2 = batch(by_partition(round2))
    rt2 = math.log((1 - lam) * math.exp(t * rs1) + lam * math.exp(t * rs2)) / t
    p2 = a2 * np.exp(t * f2 - t * rt2)
    assert strategy.history[0].diagnostics["running_estimate"] == pytest.approx(rs1, rel=1e-12)
    assert strategy.running_estimate == pytest.approx(rt2, rel=1e-12)
    np.testing.assert_allclose(strategy.last_round.weights, eta * p2, rtol=1e-12)
    assert abs(p2.sum() - 1.0) > 1e-3  # the stochastic weights do not sum to 1
    w = {k: v.astype(float) for k, v in decode(w2).items()}
    for key in SHAPES:
        update = sum(pk * (w[key] - model(c[1])[key]) for pk, c in zip(p2, by_partition(round2)))
        np.testing.assert_allclose(arrays[key].numpy(), w[key] - eta * update, atol=1e-6)


def test_negative_t_on_raw_losses_downweights_the_high_loss_client():
    strategy = ready(TermFedAvg(t=-2.0, loss_transform="none"))
    strategy.aggregate_train(1, replies())
    report = strategy.last_round
    n = report.num_examples / report.num_examples.sum()
    worst = int(np.argmax(report.losses))
    assert report.partition_ids[worst] == 2
    assert report.weights[worst] < n[worst] / 10
    assert report.weights[int(np.argmin(report.losses))] > n[int(np.argmin(report.losses))]


@pytest.mark.parametrize("t", [500.0, -500.0])
def test_large_tilt_with_losses_near_100_stays_finite(t):
    clients = [(1, 0, 10, 100.0, 1e3), (2, 1, 20, 103.0, 2e3), (3, 2, 30, 97.0, 3e3)]
    strategy = ready(TermFedAvg(t=t, lam=0.5), clients=clients)
    for server_round in (1, 2):
        ready(strategy, server_round, clients=clients)
        arrays, _ = strategy.aggregate_train(server_round, replies(clients))
        assert all(np.all(np.isfinite(a.numpy())) for a in arrays.values())
        assert np.all(np.isfinite(strategy.last_round.weights))
        assert math.isfinite(strategy.running_estimate)
    dominant = 1 if t > 0 else 2
    assert int(np.argmax(strategy.last_round.weights)) == dominant


# --- q-FFL ------------------------------------------------------------------


def test_qffl_update_equals_the_formula_in_numpy():
    q, lr = 0.5, 0.05
    L = 1 / lr
    strategy = ready(QFFL(client_learning_rate=lr, q=q))
    arrays, _ = strategy.aggregate_train(1, replies())

    w = {k: v.astype(np.float64) for k, v in decode(global_record()).items()}
    sum_d = {k: np.zeros(s) for k, s in SHAPES.items()}
    sum_h = 0.0
    for _, part, _, loss, _ in CLIENTS:
        wk = model(part)
        delta = {k: L * (w[k] - wk[k]) for k in SHAPES}
        norm2 = sum(np.sum(d**2) for d in delta.values())
        fq = (loss + 1e-10) ** q
        for k in SHAPES:
            sum_d[k] += fq * delta[k]
        sum_h += q * (loss + 1e-10) ** (q - 1) * norm2 + L * fq
    for key in SHAPES:
        np.testing.assert_allclose(arrays[key].numpy(), w[key] - sum_d[key] / sum_h, atol=1e-6)
    f = np.array([c[3] for c in by_partition()])
    np.testing.assert_allclose(strategy.last_round.weights, L * (f + 1e-10) ** q / sum_h,
                               rtol=1e-10)


def test_qffl_matches_flowers_qfedavg():
    ours = ready(QFFL(client_learning_rate=0.1, q=2.0))
    arrays, _ = ours.aggregate_train(1, replies())
    flower = FlowerQFedAvg(client_learning_rate=0.1, q=2.0, train_loss_key="train_loss_before")
    flower.current_arrays = global_record()
    flower_arrays, _ = flower.aggregate_train(1, replies())
    for key in SHAPES:
        np.testing.assert_allclose(arrays[key].numpy(), flower_arrays[key].numpy(), atol=1e-6)


def test_qffl_sum_reduction_weights_the_summed_losses():
    q, lr = 2.0, 0.1
    strategy = ready(QFFL(lr, q, loss_reduction="sum"))
    assert strategy.train_loss_key == "train_loss_before_sum"
    strategy.aggregate_train(1, replies())
    clients = by_partition()
    f = np.array([c[4] for c in clients]) + 1e-10
    w = decode(global_record())
    dist = np.array([sum(np.sum((w[k].astype(float) - model(c[1])[k].astype(float)) ** 2) for k in SHAPES)
                     for c in clients])
    lip = 1.0 / lr
    h = q * f ** (q - 1) * lip**2 * dist + lip * f**q
    np.testing.assert_array_equal(strategy.last_round.losses, f - 1e-10)
    np.testing.assert_allclose(strategy.last_round.weights, lip * f**q / h.sum(), rtol=1e-12)


def test_qffl_with_q_zero_is_a_uniform_average_of_local_models():
    strategy = ready(QFFL(client_learning_rate=0.1, q=0.0))
    arrays, _ = strategy.aggregate_train(1, replies())
    np.testing.assert_allclose(strategy.last_round.weights, np.full(len(CLIENTS), 0.25),
                               rtol=1e-12)
    for key in SHAPES:
        mean = np.mean([model(c[1])[key].astype(float) for c in CLIENTS], axis=0)
        np.testing.assert_allclose(arrays[key].numpy(), mean, atol=1e-6)


# --- AFL ----------------------------------------------------------------------


def simplex_projection_by_bisection(v: np.ndarray) -> np.ndarray:
    """argmin ||x - v|| over the simplex, as max(v - theta, 0) with sum 1: theta found by bisection."""
    low, high = v.min() - 1.0, v.max()
    for _ in range(200):
        theta = (low + high) / 2
        low, high = (theta, high) if np.maximum(v - theta, 0).sum() > 1 else (low, theta)
    return np.maximum(v - (low + high) / 2, 0)


@pytest.mark.parametrize("seed", range(6))
def test_simplex_projection_equals_a_bisection_on_the_threshold(seed):
    rng = np.random.default_rng(seed)
    v = rng.normal(scale=rng.uniform(0.01, 3), size=rng.integers(1, 30))
    x = project_onto_simplex(v)
    np.testing.assert_allclose(x, simplex_projection_by_bisection(v), atol=1e-12)
    assert np.all(x >= 0) and x.sum() == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(project_onto_simplex(x), x, atol=1e-15)  # a point of the simplex stays


AFL_PARTITIONS = {101: 0, 102: 1, 103: 2, 104: 3, 105: 4, 106: 5}  # node -> partition


def afl_replies(server_round, sampled, seed):
    """Replies of the sampled partitions with random models and losses (nodes in arbitrary order)."""
    rng = np.random.default_rng([seed, server_round])
    node_of = {p: n for n, p in AFL_PARTITIONS.items()}
    clients = [(node_of[p], p, int(rng.integers(5, 50)), float(rng.uniform(0.1, 3.0))) for p in sampled]
    models = {p: model(100 * server_round + p) for p in sampled}
    messages = [train_reply(node, models[p], **{"num-examples": n, "partition-id": p, "train_loss_before": f})
                for node, p, n, f in reversed(clients)]
    return messages, {p: f for _, p, _, f in clients}, models


def test_afl_over_several_rounds_equals_a_direct_numpy_implementation():
    gamma = 0.3
    strategy = AFL(lambda_lr=gamma)
    strategy.set_node_partitions(AFL_PARTITIONS)
    grid = FakeGrid(AFL_PARTITIONS)
    lam = np.full(6, 1 / 6)  # the reference: lambda over all six devices, uniform at the start
    w = {k: v.astype(np.float64) for k, v in model(7).items()}
    for server_round, sampled in enumerate([[0, 2, 5], [1, 2, 3, 4], [0, 5], [3], [0, 1, 2, 3, 4, 5]], start=1):
        record = ArrayRecord({k: Array(v.astype(np.float32)) for k, v in w.items()})
        list(strategy.configure_train(server_round, record, ConfigRecord(), grid))
        messages, losses, models = afl_replies(server_round, sampled, seed=3)
        arrays, _ = strategy.aggregate_train(server_round, messages)

        for p in sampled:
            lam[p] += gamma * losses[p]
        lam = simplex_projection_by_bisection(lam)
        c = lam[sampled] / lam[sampled].sum()
        w = {k: sum(ck * models[p][k].astype(np.float64) for ck, p in zip(c, sampled)) for k in SHAPES}

        report = strategy.last_round
        assert report.partition_ids == sampled
        np.testing.assert_allclose(report.weights, c, atol=1e-12)
        np.testing.assert_allclose(report.diagnostics["mixture_weights"], lam, atol=1e-12)
        assert strategy.mixture_weights == pytest.approx(dict(enumerate(lam)), abs=1e-12)
        for key in SHAPES:
            np.testing.assert_allclose(arrays[key].numpy(), w[key], atol=1e-6)
    assert not np.allclose(lam, 1 / 6)  # the losses moved lambda


def test_afl_round_raises_the_sampled_devices_with_high_loss():
    lam, c = afl_round(np.full(4, 0.25), [1, 3], [0.1, 2.0], 0.5)
    assert lam.sum() == pytest.approx(1.0) and lam[3] > lam[1] > 0
    assert lam[0] == lam[2] < 0.25  # unsampled coordinates only lose the projection's shift
    np.testing.assert_allclose(c, lam[[1, 3]] / lam[[1, 3]].sum())


def test_afl_keeps_the_model_when_every_sampled_device_has_weight_zero(caplog):
    """Possible only when their lambda is 0 and they report a zero loss (else the ascent step keeps them > 0)."""
    strategy = AFL(lambda_lr=1.0)
    strategy.set_node_partitions(AFL_PARTITIONS)
    strategy.state = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 1.0])
    record = global_record(5)
    list(strategy.configure_train(1, record, ConfigRecord(), FakeGrid(AFL_PARTITIONS)))
    messages, _, _ = afl_replies(1, [0, 1], seed=0)
    messages = [train_reply(m.metadata.src_node_id, model(1), **{**dict(m.content["metrics"]), "train_loss_before": 0.0})
                for m in messages]
    with caplog.at_level(logging.WARNING, logger="flwr"):
        arrays, _ = strategy.aggregate_train(1, messages)
    assert "model unchanged" in caplog.text
    for key in SHAPES:
        np.testing.assert_array_equal(arrays[key].numpy(), record[key].numpy())
    np.testing.assert_array_equal(strategy.last_round.weights, [0.0, 0.0])


def test_afl_keeps_lambda_through_a_failed_round_and_needs_the_partitions():
    strategy = ready(AFL(lambda_lr=0.1))
    strategy.aggregate_train(1, replies())
    lam = strategy.last_round.diagnostics["mixture_weights"]
    ready(strategy, 2)
    assert strategy.aggregate_train(2, [error_reply(c[0]) for c in CLIENTS]) == (None, None)
    assert strategy.last_round.failed and strategy.last_round.diagnostics["mixture_weights"] == lam
    unmapped = AFL()
    with pytest.raises(AggregationError, match="call set_node_partitions") as error:
        unmapped.configure_train(1, global_record(), ConfigRecord(), FakeGrid([c[0] for c in CLIENTS]))
    assert "'partition-id'" in str(error.value) and "node_partitions(grid" in str(error.value)


def test_afl_excludes_a_partition_it_was_not_told_of_and_aggregates_the_rest(caplog):
    strategy = ready(AFL())
    arrays, _ = strategy.aggregate_train(1, replies([(17, 0, 10, 0.3, 3.0), (18, 7, 10, 0.3, 3.0)]))
    assert arrays is not None and strategy.last_round.partition_ids == [0]
    assert [(e.node_id, e.partition_id) for e in strategy.last_round.excluded] == [(18, 7)]
    assert "partition-id 7 is not in the partition table" in strategy.last_round.excluded[0].reason
    assert "excluding reply from node 18 (partition 7)" in caplog.text


# --- determinism and reports ------------------------------------------------


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_reply_order_does_not_change_the_result_bitwise(name):
    params = {"client_learning_rate": 0.1} if name == "qffl" else {}
    results = []
    for order in ([0, 1, 2, 3], [3, 1, 0, 2], [2, 3, 1, 0]):
        strategy = ready(build_strategy(name, **params))
        arrays, metrics = strategy.aggregate_train(1, [replies()[i] for i in order])
        results.append((decode(arrays), dict(metrics), strategy.last_round))
    for arrays, metrics, report in results[1:]:
        for key in SHAPES:
            assert np.array_equal(arrays[key], results[0][0][key])
        assert metrics == results[0][1]
        assert np.array_equal(report.weights, results[0][2].weights)


def test_round_report_lists_valid_replies_sorted_by_partition():
    strategy = ready(TermFedAvg(t=1.0))
    strategy.aggregate_train(1, replies())
    report = strategy.last_round
    assert isinstance(report, TrainReport) and report.server_round == 1
    assert report.partition_ids == [0, 1, 2, 4]
    assert report.node_ids == [17, 42, 555, 9001]
    np.testing.assert_array_equal(report.losses, [0.3, 1.4, 2.1, 0.9])
    np.testing.assert_array_equal(report.num_examples, [10, 5, 25, 30])
    assert report.excluded == [] and not report.failed
    assert strategy.history == [report]


def test_replies_without_partition_id_sort_by_node_id_after_the_others():
    msgs = replies()
    msgs.append(train_reply(3, model(9), **{"num-examples": 5, "train_loss_before": 1.0}))
    msgs.append(train_reply(2, model(8), **{"num-examples": 5, "train_loss_before": 1.0}))
    strategy = ready(FedAvg())
    strategy.aggregate_train(1, msgs)
    assert strategy.last_round.node_ids == [17, 42, 555, 9001, 2, 3]
    assert strategy.last_round.partition_ids == [0, 1, 2, 4, -1, -1]


# --- failure handling -------------------------------------------------------


def bad_reply(kind: str) -> Message:
    node = 777
    metrics = {"num-examples": 12, "partition-id": 3, "train_loss_before": 0.5, "train_loss_before_sum": 6.0}
    arrays = model(3)
    if kind == "error":
        return error_reply(node)
    if kind == "nan_loss":
        metrics["train_loss_before"] = metrics["train_loss_before_sum"] = float("nan")
    elif kind == "inf_loss":
        metrics["train_loss_before"] = metrics["train_loss_before_sum"] = float("inf")
    elif kind == "missing_loss":
        del metrics["train_loss_before"], metrics["train_loss_before_sum"]
    elif kind == "missing_num_examples":
        del metrics["num-examples"]
    elif kind == "nan_array":
        arrays["layer.bias"][1] = np.nan
    elif kind == "wrong_keys":
        arrays["extra"] = np.zeros(2, np.float32)
    elif kind == "no_arrays":
        arrays = None
    return train_reply(node, arrays, **metrics)


FAILURES = ["error", "nan_loss", "inf_loss", "missing_loss", "missing_num_examples",
            "nan_array", "wrong_keys", "no_arrays"]
LOSS_FAILURES = ("nan_loss", "inf_loss", "missing_loss")  # failures only for the strategies that need F_k


def failures_of(name: str) -> list[str]:
    return [k for k in FAILURES if STRATEGIES[name].strategy.needs_loss or k not in LOSS_FAILURES]


@pytest.mark.parametrize(("name", "kind"), [(n, k) for n in sorted(STRATEGIES) for k in failures_of(n)])
def test_bad_reply_is_excluded_with_a_warning_and_the_others_aggregated(name, kind, caplog):
    params = {"client_learning_rate": 0.1} if name == "qffl" else {"t": 1.0} if name == "term" else {}
    clean = ready(build_strategy(name, **params))
    expected, expected_metrics = clean.aggregate_train(1, replies())

    strategy = ready(build_strategy(name, **params))
    msgs = replies()
    msgs.insert(2, bad_reply(kind))
    with caplog.at_level(logging.WARNING, logger="flwr"):
        arrays, metrics = strategy.aggregate_train(1, msgs)

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("node 777" in w for w in warnings), warnings
    (excluded,) = strategy.last_round.excluded
    assert excluded.node_id == 777
    assert excluded.partition_id == (None if kind == "error" else 3)
    assert 777 not in strategy.last_round.node_ids
    for key in SHAPES:
        assert np.array_equal(arrays[key].numpy(), expected[key].numpy())
    assert dict(metrics) == dict(expected_metrics)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_all_replies_invalid_returns_none_and_keeps_the_model(name, caplog):
    params = {"client_learning_rate": 0.1} if name == "qffl" else {}
    strategy = ready(build_strategy(name, **params))
    msgs = [bad_reply(kind) for kind in failures_of(name)]
    with caplog.at_level(logging.WARNING, logger="flwr"):
        assert strategy.aggregate_train(1, msgs) == (None, None)
    report = strategy.last_round
    assert report.failed and report.node_ids == [] and report.weights.size == 0
    assert len(report.excluded) == len(failures_of(name))
    assert "model unchanged" in caplog.text


def test_term_keeps_its_running_estimate_through_a_failed_round():
    strategy = ready(TermFedAvg(t=1.0, lam=0.5))
    strategy.aggregate_train(1, replies())
    estimate = strategy.running_estimate
    ready(strategy, 2)
    assert strategy.aggregate_train(2, [error_reply(1)]) == (None, None)
    assert strategy.running_estimate == estimate == strategy.last_round.diagnostics["running_estimate"]


def test_reply_without_reference_model_is_checked_against_the_first_valid_reply():
    msgs = replies()
    bad = model(7)
    bad["other"] = np.zeros(1, np.float32)
    msgs.append(train_reply(5, bad, **{"num-examples": 3, "partition-id": 9, "train_loss_before": 1.0}))
    arrays, _ = FedAvg().aggregate_train(1, msgs)  # no configure_train: no global model
    assert set(arrays.keys()) == set(SHAPES)


def test_qffl_and_term_need_configure_train_first():
    with pytest.raises(Exception, match="configure_train"):
        QFFL(client_learning_rate=0.1).aggregate_train(1, replies())


def test_qffl_excludes_negative_losses():
    msgs = replies()
    msgs.append(train_reply(5, model(5), **{"num-examples": 3, "partition-id": 9,
                                            "train_loss_before": -1.0}))
    strategy = ready(QFFL(client_learning_rate=0.1))
    strategy.aggregate_train(1, msgs)
    assert strategy.last_round.excluded[0].reason == "metric 'train_loss_before' must be >= 0, got -1.0"


# --- evaluation -------------------------------------------------------------


def evaluate_reply(node_id, part, n, acc) -> Message:
    metrics = MetricRecord({"num-examples": n, "partition-id": part, "test_accuracy": acc})
    return Message(metadata=metadata(node_id, MessageType.EVALUATE),
                   content=RecordDict({"metrics": metrics}))


def test_aggregate_evaluate_filters_sorts_and_averages_like_flower(caplog):
    good = [evaluate_reply(8, 2, 10, 0.5), evaluate_reply(3, 0, 30, 0.9)]
    bad = [error_reply(66), evaluate_reply(77, 1, float("nan"), 0.1)]
    strategy = FedAvg()
    with caplog.at_level(logging.WARNING, logger="flwr"):
        metrics = strategy.aggregate_evaluate(1, [good[0], bad[0], good[1], bad[1]])
    assert dict(metrics) == pytest.approx(dict(FlowerFedAvg().aggregate_evaluate(1, good)))
    report = strategy.last_evaluation
    assert report.partition_ids == [0, 2] and report.node_ids == [3, 8]
    assert report.metrics[0]["test_accuracy"] == 0.9
    assert [e.node_id for e in report.excluded] == [77, 66]
    assert "node 66" in caplog.text and "node 77" in caplog.text
    assert strategy.aggregate_evaluate(2, bad) is None


# --- sampling -----------------------------------------------------------------


def sampled_partitions(strategy: FedAvg, mapping: dict[int, int], messages) -> list[int]:
    return sorted(mapping[m.metadata.dst_node_id] for m in messages)


def random_mapping(num_partitions: int, seed: int) -> dict[int, int]:
    rng = np.random.default_rng(seed)
    nodes = rng.choice(2**62, size=num_partitions, replace=False)
    parts = rng.permutation(num_partitions)
    return {int(n): int(p) for n, p in zip(nodes, parts)}


def configure(strategy, mapping, server_round, evaluate=False):
    strategy.set_node_partitions(mapping)
    grid = FakeGrid(mapping.keys())
    method = strategy.configure_evaluate if evaluate else strategy.configure_train
    config = ConfigRecord()
    messages = list(method(server_round, global_record(), config, grid))
    assert config["server-round"] == server_round
    return sampled_partitions(strategy, mapping, messages)


def test_same_seed_samples_the_same_partitions_whatever_the_node_ids():
    first, second = random_mapping(23, 1), random_mapping(23, 2)
    assert first.keys() != second.keys()
    for server_round in (1, 2, 7):
        a = configure(FedAvg(clients_per_round=10, seed=5), first, server_round)
        b = configure(FedAvg(clients_per_round=10, seed=5), second, server_round)
        assert a == b
        assert configure(FedAvg(clients_per_round=10, seed=5), first, server_round,
                         evaluate=True) == list(range(23))


def test_different_rounds_and_seeds_sample_differently():
    mapping = random_mapping(23, 1)
    strategy = FedAvg(clients_per_round=10, seed=5)
    rounds = [tuple(configure(strategy, mapping, r)) for r in range(1, 6)]
    assert len(set(rounds)) == 5
    assert configure(FedAvg(clients_per_round=10, seed=6), mapping, 1) != list(rounds[0])


@pytest.mark.parametrize("per_round", [1, 9, 10, 23])
def test_clients_per_round_is_honoured_exactly(per_round):
    partitions = configure(FedAvg(clients_per_round=per_round), random_mapping(23, 3), 1)
    assert len(partitions) == len(set(partitions)) == per_round


def test_only_connected_partitions_are_sampled():
    mapping = random_mapping(10, 4)
    strategy = FedAvg(clients_per_round=4)
    strategy.set_node_partitions(mapping)
    connected = [n for n, p in mapping.items() if p % 2 == 0]
    messages = list(strategy.configure_train(1, global_record(), ConfigRecord(),
                                             FakeGrid(connected)))
    assert {m.metadata.dst_node_id for m in messages} <= set(connected)
    assert len(messages) == 4


@pytest.mark.parametrize(("fraction", "expected"), [(1.0, 10), (0.3, 3), (0.25, 3), (0.0, 0)])
def test_evaluate_fraction_samples_ceil_of_fraction_times_partitions(fraction, expected):
    partitions = configure(FedAvg(evaluate_fraction=fraction), random_mapping(10, 5), 1,
                           evaluate=True)
    assert len(partitions) == expected


def test_without_partitions_flower_sampling_is_used_and_arrays_are_kept():
    strategy = FedAvg(fraction_train=0.5)
    arrays = global_record()
    messages = list(strategy.configure_train(3, arrays, ConfigRecord(), FakeGrid(range(1, 9))))
    assert len(messages) == 4
    assert messages[0].content["config"]["server-round"] == 3
    assert set(strategy.current_arrays.keys()) == set(arrays.keys())
    assert strategy.current_arrays is not arrays


def test_a_partition_mapped_to_two_nodes_is_refused():
    with pytest.raises(ValueError, match="partition 3 is mapped to two nodes"):
        FedAvg().set_node_partitions({1: 3, 2: 3})


# --- construction -------------------------------------------------------------


def test_build_strategy_builds_each_name_and_refuses_unknown_ones():
    assert type(build_strategy("fedavg")) is FedAvg
    assert type(build_strategy("qffl", client_learning_rate=0.1, q=0.2)) is QFFL
    term = build_strategy("term", t=2.0, lam=0.5, clients_per_round=10)
    assert type(term) is TermFedAvg and term.t == 2.0 and term.clients_per_round == 10
    with pytest.raises(ValueError, match="allowed names: fedavg, fedavg_uniform, qffl, term, afl, median, trimmed_mean, krum"):
        build_strategy("fedprox")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: FedAvg(clients_per_round=0), "clients_per_round must be a positive int"),
        (lambda: FedAvg(seed=-1), "seed must be a non-negative int"),
        (lambda: FedAvg(evaluate_fraction=1.5), r"evaluate_fraction must be in \[0, 1\]"),
        (lambda: TermFedAvg(t=float("nan")), r"TermFedAvg: t: Input should be a finite number \(got nan\)"),
        (lambda: TermFedAvg(lam=0.0), r"lam: Input should be greater than 0 \(got 0.0\)"),
        (lambda: TermFedAvg(lam=1.5), r"lam: Input should be less than or equal to 1 \(got 1.5\)"),
        (lambda: TermFedAvg(base_weighting="sizes"), "base_weighting: Input should be 'num_examples' or 'uniform'"),
        (lambda: TermFedAvg(loss_reduction="max"), "loss_reduction: Input should be 'mean' or 'sum'"),
        (lambda: TermFedAvg(server_learning_rate=0.0), r"server_lr: Input should be greater than 0 \(got 0.0\)"),
        (lambda: QFFL(client_learning_rate=0.0), "client_learning_rate must be a positive number, got 0.0"),
        (lambda: QFFL(client_learning_rate=0.1, q=-1.0), r"QFFL: q: Input should be greater than or equal to 0 \(got -1.0\)"),
    ],
)
def test_invalid_settings_raise_clear_value_errors(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_summary_logs_the_settings(caplog):
    with caplog.at_level(logging.INFO, logger="flwr"):
        TermFedAvg(t=-3.0, lam=0.5).summary()
        QFFL(client_learning_rate=0.1, q=0.3).summary()
    assert "robustness" in caplog.text and "lam: 0.5" in caplog.text and "q: 0.3" in caplog.text


def test_records_of_lists_the_records_of_one_type_as_flowers_typed_views_do():
    content = RecordDict(
        {
            "m1": MetricRecord({"a": 1.0}),
            "arrays": ArrayRecord({"w": Array(np.ones(2, dtype=np.float32))}),
            "config": ConfigRecord({"x": "y"}),
            "m2": MetricRecord({"b": 2}),
        }
    )
    assert records_of(content, MetricRecord) == list(content.metric_records.values())
    assert records_of(content, ArrayRecord) == list(content.array_records.values())
    assert records_of(content, ConfigRecord) == list(content.config_records.values())
    assert records_of(RecordDict(), MetricRecord) == []
