"""Summed and mean losses agree when device sizes are equal: TERM with summed F_k at t is TERM with mean F_k at n t.

On the vehicle data the paper's summed losses rank devices by size, so the
paper's t = 0.1 hands the round to the largest devices; with equal sizes the
two modes are one and the same tilt, which this check shows on synthetic data.
"""

from __future__ import annotations

import numpy as np

from conftest import small_scenario
from term_fl.data import dataset_for
from term_fl.engines import run_scenario
from term_fl.federation import Recorder


class Rounds(Recorder):
    def __init__(self) -> None:
        self.records = []

    def record_round(self, record) -> None:
        self.records.append(record)


def _run(*overrides: str, equal_sizes: bool = True) -> list:
    recorder = Rounds()
    sizes = ("data.samples_per_device=20",) if equal_sizes else ()
    scenario = small_scenario("run.engine=inprocess", "run.rounds=4", *sizes, "data.train_fraction=0.6",
                              "data.val_fraction=0.2", "data.test_fraction=0.2", "strategy.name=term", *overrides)
    train_sizes = set(dataset_for(scenario).metadata["sizes"]["train"])
    assert (train_sizes == {12}) == equal_sizes  # with equal sizes every device trains on 12 samples
    run_scenario(scenario, recorder)
    return recorder.records


def test_summed_losses_at_t_tilt_as_mean_losses_at_n_times_t_when_sizes_are_equal():
    summed = _run("strategy.term.loss_reduction=sum", "strategy.term.t=0.1")
    mean = _run("strategy.term.loss_reduction=mean", "strategy.term.t=1.2")  # n t = 12 x 0.1
    for a, b in zip(summed, mean, strict=True):
        wa, wb = a.tilted_weights, b.tilted_weights
        assert wa.keys() == wb.keys()
        np.testing.assert_allclose([wa[k] for k in wa], [wb[k] for k in wa], rtol=1e-9)
        for split in ("val", "test"):
            assert a.stats[split]["worst_10"] == b.stats[split]["worst_10"]
            assert a.stats[split]["mean"] == b.stats[split]["mean"]


def test_with_unequal_sizes_the_two_modes_differ():
    summed = _run("strategy.term.loss_reduction=sum", "strategy.term.t=0.1", equal_sizes=False)
    mean = _run("strategy.term.loss_reduction=mean", "strategy.term.t=1.2", equal_sizes=False)
    assert any(a.tilted_weights != b.tilted_weights for a, b in zip(summed, mean, strict=True))
