"""Sampling proportional to n_k (the q-FFL and TERM reference code's client sampling), beside the uniform default."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import small_scenario
from term_fl.common.seeding import TRAIN_SAMPLING, sampling_rng
from term_fl.config import config_hash
from term_fl.data import dataset_for
from term_fl.engines import run_scenario
from term_fl.strategies import FedAvg, TermFedAvg
from term_fl.strategies.sampling import PartitionSampler

NODES = {100 + p: p for p in range(6)}
SIZES = {0: 1, 1: 1, 2: 1, 3: 1, 4: 1000, 5: 1000}


def test_size_sampling_draws_what_numpy_draws_with_probabilities_proportional_to_n_k():
    sampler = PartitionSampler(NODES, seed=7, sizes=SIZES)
    got = sampler.sample(4, NODES, 3, TRAIN_SAMPLING, proportional=True)
    weights = np.array([SIZES[p] for p in range(6)], dtype=float)
    want = sorted(int(p) for p in sampling_rng(7, 4, TRAIN_SAMPLING).choice(
        list(range(6)), size=3, replace=False, p=weights / weights.sum()))
    assert got == want


def test_the_large_devices_are_drawn_almost_always_and_the_uniform_default_is_unchanged():
    sampler = PartitionSampler(NODES, seed=0, sizes=SIZES)
    drawn = [sampler.sample(r, NODES, 2, TRAIN_SAMPLING, proportional=True) for r in range(1, 201)]
    assert sum(d == [4, 5] for d in drawn) > 190  # p(other) ~ 4/2004 per draw
    uniform = [sampler.sample(r, NODES, 2, TRAIN_SAMPLING) for r in range(1, 201)]
    assert uniform == [PartitionSampler(NODES, seed=0).sample(r, NODES, 2, TRAIN_SAMPLING) for r in range(1, 201)]
    assert sum(d == [4, 5] for d in uniform) < 40


def test_only_connected_partitions_are_drawn_with_their_sizes_renormalised():
    sampler = PartitionSampler(NODES, seed=3, sizes=SIZES)
    connected = [100, 101, 102, 105]
    for r in range(1, 30):
        assert set(sampler.sample(r, connected, 2, TRAIN_SAMPLING, proportional=True)) <= {0, 1, 2, 5}


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ({0: 1, 1: 2}, r"sizes: no number of training examples for partitions \[2, 3, 4, 5\]"),
        ({**SIZES, 3: 0}, r"each partition's number of training examples must be an integer >= 1, got \{3: 0\}"),
        ({**SIZES, 3: 2.5}, r"must be an integer >= 1"),
    ],
)
def test_bad_sizes_are_refused_naming_the_partitions(sizes, message):
    with pytest.raises(ValueError, match=message):
        PartitionSampler(NODES, seed=0, sizes=sizes)


def test_size_sampling_without_sizes_says_how_to_give_them():
    strategy = FedAvg(clients_per_round=2, sampling="size")
    with pytest.raises(ValueError, match=r"set_node_partitions\(mapping, sizes=\{partition_id: n_k\}\)"):
        strategy.set_node_partitions(NODES)
    with pytest.raises(ValueError, match="sampling must be one of 'uniform', 'size', got 'sizes'"):
        TermFedAvg(1.0, sampling="sizes")


def test_a_scenario_samples_by_size_and_hashes_apart_from_uniform_only_when_set():
    uniform, by_size = small_scenario("run.rounds=3"), small_scenario("run.rounds=3", "run.sampling=size")
    assert config_hash(small_scenario("run.rounds=3", "run.sampling=uniform")) == config_hash(uniform)
    assert config_hash(by_size) != config_hash(uniform)
    result = run_scenario(by_size)
    assert result.rounds_completed == 3
    # the last round trained the partitions the sampler draws in proportion to the train splits' sizes
    sizes = dict(enumerate(dataset_for(by_size).metadata["sizes"]["train"]))
    nodes = {p: p for p in sizes}
    want = PartitionSampler(nodes, by_size.run.seed, sizes).sample(
        3, nodes, by_size.run.clients_per_round, TRAIN_SAMPLING, proportional=True)
    assert sorted(row["partition_id"] for row in result.last.train_rows) == want
    # (the uniform draw of that round differs, so the check tells the two apart)
    assert PartitionSampler(nodes, by_size.run.seed).sample(3, nodes, by_size.run.clients_per_round,
                                                            TRAIN_SAMPLING) != want
