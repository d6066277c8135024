"""The opt-in patches of Flower's Simulation Engine change the time, never a stored number, and leave nothing behind.

Each case runs a scenario on Flower's engine in a Ray session of its own:
with every patch (the linear dispatcher, the engine's node table, actor
reuse across the session's two runs), without any, and with the fast paths
off altogether. The stored results are identical, and the process (torch's
thread count, Flower's task identity, the environment, Flower's modules and
loggers) is the same after the session as before it.
"""

from __future__ import annotations

import pytest
import torch

from conftest import small_scenario
from process_state import process_state
from stored_results import assert_same_stored, stored
from term_fl.flower_internals import override
from term_fl.results import ResultsStore
from term_fl.runs.run import run_one

pytestmark = pytest.mark.slow

SETTINGS = {
    "every patch": {"patches": "all"},
    "no patch": {"patches": "none"},
    "fast paths off": {"fast": False, "patches": "all"},
}


def test_the_patches_change_no_stored_number_and_a_session_restores_the_process(tmp_path):
    from term_fl.engines.flower import actors_reused, ray_session

    scenario = small_scenario("run.engine=flower", "strategy.name=term", "strategy.t=2")
    store = ResultsStore(tmp_path / "r.db")
    results, reused = {}, {}
    threads = torch.get_num_threads()
    for name, settings in SETTINGS.items():
        before = process_state()
        with override(**settings), ray_session(scenario):
            first = run_one(scenario, store, out_dir=tmp_path / name / "1").run_id
            second = run_one(scenario, store, out_dir=tmp_path / name / "2").run_id
            reused[name] = actors_reused()
        assert process_state() == before, name
        results[name] = stored(store, first)
        assert_same_stored(results[name], stored(store, second))
    assert reused == {"every patch": 1, "no patch": 0, "fast paths off": 0}
    assert_same_stored(results["every patch"], results["no patch"])
    assert_same_stored(results["every patch"], results["fast paths off"])
    assert torch.get_num_threads() == threads
