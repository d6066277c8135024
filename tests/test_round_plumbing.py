"""A round's plumbing without per-client work: seeds derived together, models combined stacked, instructions built lazily.

Each fast form is compared with the plain one it replaces: ``derive_seeds``
with ``derive_seed`` one partition at a time, the stacked combination with
the loop over client models (bit for bit), :class:`Instructions` with
Flower's ``_construct_messages``; and an in-process round with a batch
executor builds no Message for its instructions.
"""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp.strategy import FedAvg as FlowerFedAvg

from conftest import small_scenario
from term_fl.common.seeding import derive_seed, derive_seeds
from term_fl.engines import run_scenario
from term_fl.federation.loop import Recorder
from term_fl.flower_internals import serverapp_identity
from term_fl.strategies import instructions as instructions_module
from term_fl.strategies.arithmetic import combine_models
from term_fl.strategies.instructions import Instructions
from term_fl.strategies.stacked import StackedModels


@pytest.mark.parametrize("run_seed, server_round", [(0, 1), (0, 0), (2**32 - 1, 7), (12345, 2**32 - 1)])
def test_derive_seeds_gives_derive_seeds_value_for_every_partition(run_seed, server_round):
    pids = np.concatenate([np.arange(40), np.random.default_rng(run_seed % 97).integers(0, 2**32, 25)])
    want = [derive_seed(run_seed, server_round, int(p)) for p in pids]
    assert derive_seeds(run_seed, server_round, pids).tolist() == want
    assert derive_seeds(run_seed, server_round, pids, stream=5).tolist() == [
        derive_seed(run_seed, server_round, int(p), 5) for p in pids]


def test_derive_seeds_beyond_32_bit_words_and_for_no_partition():
    """Entropy words of 2^32 or more (SeedSequence splits them) take the one-by-one path; no partition, no seed."""
    assert derive_seeds(2**40, 3, [1, 2**33]).tolist() == [derive_seed(2**40, 3, 1), derive_seed(2**40, 3, 2**33)]
    assert derive_seeds(0, 1, []).shape == (0,)


@pytest.mark.parametrize("clients", [1, 2, 9, 40])
def test_stacked_models_combine_as_the_loop_over_clients_bit_for_bit(clients):
    rng = np.random.default_rng(clients)
    arrays = {"w": rng.normal(size=(clients, 7, 3)).astype(np.float32),
              "b": rng.normal(size=(clients, 3)).astype(np.float32),
              "scalar": rng.normal(size=clients).astype(np.float32)}  # a 0-d array per client
    coefficients = rng.dirichlet(np.ones(clients)) * rng.uniform(0.5, 1.5)
    stacked = StackedModels(arrays)
    loop = combine_models(list(stacked), coefficients)  # a plain list: one client at a time
    fast = combine_models(stacked, coefficients)
    for name in arrays:
        assert fast[name].shape == loop[name].shape and fast[name].dtype == np.float64
        assert fast[name].tobytes() == loop[name].tobytes()
    with pytest.raises(ValueError, match="coefficients"):
        combine_models(stacked, coefficients[:-1] if clients > 1 else [0.5, 0.5])


def test_instructions_are_flowers_messages_built_once():
    content = RecordDict({"config": ConfigRecord({"x": 1})})
    with serverapp_identity(run_id=7):
        lazy = Instructions(content, [5, 3, 9], MessageType.TRAIN)
        assert len(lazy) == 3 and not lazy.built
        built = list(lazy)
        flowers = list(FlowerFedAvg()._construct_messages(content, [5, 3, 9], MessageType.TRAIN))
    assert lazy.built and list(lazy) == built and lazy[1] is built[1]  # the same objects every time
    for ours, theirs in zip(built, flowers, strict=True):
        assert isinstance(ours, Message) and ours.content is content
        assert (ours.metadata.dst_node_id, ours.metadata.message_type, ours.metadata.group_id) == (
            theirs.metadata.dst_node_id, theirs.metadata.message_type, theirs.metadata.group_id)


@pytest.mark.parametrize("executor, builds", [("compiled", False), ("cohort", False), ("sequential", True)])
def test_an_in_process_round_builds_messages_only_for_the_clientapp(monkeypatch, executor, builds):
    """A batch executor answers the strategy's instructions as they are; the ClientApp needs Messages."""
    built = []
    real = instructions_module.Message

    def counting(*args, **kwargs):
        built.append(kwargs.get("dst_node_id"))
        return real(*args, **kwargs)

    monkeypatch.setattr(instructions_module, "Message", counting)
    scenario = small_scenario(f"run.executor={executor}", "run.rounds=2", "run.evaluate_every=1")
    run_scenario(scenario, Recorder())
    assert bool(built) == builds
