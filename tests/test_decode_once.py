"""Each training reply's model is decoded exactly once per round, whatever the strategy, defence and executor.

The decoder (``term_fl.flower_internals.from_array``, and Flower's own
``Array.numpy``) is instrumented for a whole in-process run; every array of
every reply the strategy aggregated must have been decoded once: by the
reply filter, whose decoded models the defences, the round function and the
combine step share.
"""

from __future__ import annotations

import sys
from collections import Counter

import pytest
from flwr.app import Array

import term_fl.flower_internals as internals
from conftest import small_scenario
from term_fl.engines import run_scenario
from term_fl.strategies import STRATEGIES, FedAvg
from term_fl.strategies.cohort_replies import CohortReplies
from term_fl.strategies.replies import arrays_of


@pytest.fixture
def decodes(monkeypatch):
    """Decodes per Array object (by id), and the replies the strategy aggregated.

    Every decoded Array is kept alive until the test ends: an id is unique only
    among live objects, and an array decoded elsewhere (a client's copy of the
    global model) that was freed could hand its id, and its count, to a reply.
    """
    counts: Counter[int] = Counter()
    replies: list = []
    alive: list = []
    original_from_array, original_numpy = internals.from_array, Array.numpy
    inside = [False]

    def from_array(array, *args, **kwargs):
        alive.append(array)
        counts[id(array)] += 1
        inside[0] = True
        try:
            return original_from_array(array, *args, **kwargs)
        finally:
            inside[0] = False

    def numpy(array, *args, **kwargs):
        if not inside[0]:  # Flower's decoder called directly, not through from_array's slow path
            alive.append(array)
            counts[id(array)] += 1
        return original_numpy(array, *args, **kwargs)

    # every module that imported the decoder by name holds its own binding of it
    for module in [m for name, m in sys.modules.items() if name.startswith("term_fl") and m is not None]:
        if getattr(module, "from_array", None) is original_from_array:
            monkeypatch.setattr(module, "from_array", from_array)
    monkeypatch.setattr(Array, "numpy", numpy)

    original_round = FedAvg.aggregate_round

    def aggregate_round(self, server_round, messages):
        messages = messages if isinstance(messages, CohortReplies) else list(messages)
        replies.append(messages)
        return original_round(self, server_round, messages)

    monkeypatch.setattr(FedAvg, "aggregate_round", aggregate_round)
    return counts, replies


DEFENDED = [("strategy.name=term", "strategy.max_update_norm=1.2", "strategy.clip_loss=2"),
            ("strategy.name=qffl", "strategy.max_update_norm=1.2")]


@pytest.mark.parametrize("executor", ["sequential", "cohort", "compiled"])
@pytest.mark.parametrize(
    "strategy",
    [*((f"strategy.name={name}",) for name in STRATEGIES), ("strategy.name=krum", "strategy.num_to_keep=2"),
     *DEFENDED],
    ids=[*STRATEGIES, "multi-krum", "term-defences", "qffl-max-update-norm"],
)
def test_each_reply_is_decoded_exactly_once_per_round(decodes, strategy, executor):
    counts, replies = decodes
    scenario = small_scenario("run.engine=inprocess", f"run.executor={executor}", "run.rounds=2", *strategy)
    result = run_scenario(scenario)
    assert result.rounds_completed == 2 and len(replies) == 2
    if executor != "sequential":  # the batched executors' replies come stacked: nothing to decode
        assert all(isinstance(r, CohortReplies) and len(r) == scenario.run.clients_per_round for r in replies)
        return
    messages = [msg for batch in replies for msg in batch]
    assert len(messages) == 2 * scenario.run.clients_per_round
    per_reply = [[counts[id(array)] for array in arrays_of(msg).values()] for msg in messages]
    assert per_reply == [[1] * len(arrays_of(msg)) for msg in messages]
