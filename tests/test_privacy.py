"""term-fl's strategies inside Flower 1.42's differential-privacy wrappers (issue 23, 'Privacy').

term-fl's FedAvg gives what Flower's FedAvg gives under the same wrapper and
noise seed (without an accountant: Flower's accountant accepts its own FedAvg
only); a strategy whose weights are not FedAvg's or 1/m is refused with a
message that names term-fl and why, detected through the wrapper's call of
``configure_train`` (term_fl/flower_internals/dp_wrappers.py).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord
from flwr.serverapp import strategy as flower
from flwr.supercore.privacy_accounting import SamplingMethod
from flwr.supercore.task_identity import TaskIdentity

from mock_replies import mock_reply
from term_fl.flower_internals import DP_WRAPPERS, calling_dp_wrapper
from term_fl.strategies import AFL, QFFL, FedAvg, FedAvgUniform, FedMedian, FedTrimmedAvg, Krum, TermFedAvg

W0 = {"a": np.zeros((2, 3), dtype=np.float32), "b": np.zeros(3, dtype=np.float32)}
NODES = [21, 22, 23, 24]


@pytest.fixture(autouse=True)
def server_identity(monkeypatch):
    """Instruction Messages read the run / node / task id of the running ServerApp."""
    monkeypatch.setattr(TaskIdentity, "_run_id", 1)
    monkeypatch.setattr(TaskIdentity, "_node_id", 0)
    monkeypatch.setattr(TaskIdentity, "_task_id", 1)


class FakeGrid:
    def get_node_ids(self):
        return list(NODES)


def replies(norm_bit: bool = False):
    """Fresh replies each call: the server-side wrappers clip the replies' arrays in place."""
    rng = np.random.default_rng(7)
    out = []
    for k, node in enumerate(NODES):
        arrays = {name: (rng.normal(size=value.shape) * (k + 1)).astype(np.float32) for name, value in W0.items()}
        metrics = {"num-examples": 10 * (k + 1), "train_loss_before": 0.4 + 0.1 * k}
        if norm_bit:
            metrics["norm_bit"] = 1.0
        out.append(mock_reply(arrays, metrics, node))
    return out


def wrap(name: str, strategy):
    clipping = ({"initial_clipping_norm": 1.0, "clipped_count_stddev": 1.0} if "Adaptive" in name
                else {"clipping_norm": 1.0})
    return getattr(flower, name)(strategy, noise_multiplier=0.5, num_sampled_clients=len(NODES), **clipping)


def initial() -> ArrayRecord:
    return ArrayRecord({k: Array(v) for k, v in W0.items()})


@pytest.mark.parametrize("name", DP_WRAPPERS)
def test_fedavg_equals_flowers_fedavg_under_the_same_dp_wrapper_and_noise_seed(name):
    results = []
    for strategy in (flower.FedAvg(min_available_nodes=4), FedAvg(min_available_nodes=4)):
        dp = wrap(name, strategy)
        list(dp.configure_train(1, initial(), ConfigRecord(), FakeGrid()))
        np.random.seed(2024)  # the wrappers' noise comes from numpy's global generator
        arrays, _ = dp.aggregate_train(1, replies(norm_bit="ClientSide" in name))
        results.append({k: v.numpy() for k, v in arrays.items()})
    flowers, ours = results
    for key in W0:
        assert ours[key].dtype == flowers[key].dtype
        np.testing.assert_allclose(ours[key], flowers[key], rtol=0, atol=1e-6)  # float32 rounding of the average
        assert not np.array_equal(ours[key], W0[key])


REFUSED = {
    "TermFedAvg(t=1)": lambda: TermFedAvg(t=1.0), "TermFedAvg(t=-2)": lambda: TermFedAvg(t=-2.0),
    "QFFL": lambda: QFFL(0.1), "AFL": lambda: AFL(), "FedMedian": FedMedian, "FedTrimmedAvg": FedTrimmedAvg,
    "Krum": Krum,
}


@pytest.mark.parametrize("name", DP_WRAPPERS)
@pytest.mark.parametrize("label", sorted(REFUSED))
def test_a_strategy_with_other_weights_is_refused_inside_any_dp_wrapper(label, name):
    strategy = REFUSED[label]()
    strategy.set_node_partitions({node: k for k, node in enumerate(NODES)})
    with pytest.raises(ValueError, match=f"term-fl's {type(strategy).__name__} refuses to run inside Flower's {name}"
                                         r".*weight 1/m.*README, 'Privacy'") as error:
        list(wrap(name, strategy).configure_train(1, initial(), ConfigRecord(), FakeGrid()))
    assert "privacy the wrapper reports would be false" in str(error.value)


@pytest.mark.parametrize("make", [FedAvg, FedAvgUniform, lambda: TermFedAvg(t=0.0),
                                  lambda: TermFedAvg(t=0.0, base_weighting="uniform")])
def test_fedavg_fedavg_uniform_and_term_at_t_0_run_inside_a_dp_wrapper(make):
    strategy = make()
    messages = list(wrap(DP_WRAPPERS[0], strategy).configure_train(1, initial(), ConfigRecord(), FakeGrid()))
    assert len(messages) == len(NODES)


def test_outside_a_wrapper_nothing_is_detected_and_term_runs():
    strategy = TermFedAvg(t=1.0)
    assert calling_dp_wrapper(strategy) is None
    assert len(list(strategy.configure_train(1, initial(), ConfigRecord(), FakeGrid()))) == len(NODES)


def test_flowers_accountant_accepts_only_flowers_fedavg_the_one_line_swap():
    accountant = SimpleNamespace(config=SimpleNamespace(sampling_method=SamplingMethod.NO_AMPLIFICATION))
    flower.DifferentialPrivacyServerSideFixedClipping(flower.FedAvg(), 1.0, 1.0, 4, accountant=accountant)
    with pytest.raises(ValueError, match="requires a strategy using FedAvg.aggregate_train"):
        flower.DifferentialPrivacyServerSideFixedClipping(FedAvg(), 1.0, 1.0, 4, accountant=accountant)
