"""run.executor = "cohort": the in-process engine's batched executor gives the ClientApp's replies.

One round is compared reply by reply with the sequential executor (the
ClientApp, message by message); whole runs are compared on what they
record. The statistical check over 100 rounds and 5 seeds is
``python -m benchmarks.cohort_equivalence`` (too slow for CI).
"""

from __future__ import annotations

import json
import logging
import sys

import numpy as np
import pytest
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict

from conftest import small_scenario, vehicle_path
from term_fl.flower_internals import from_array_record, serverapp_identity
from term_fl.common.keys import ARRAYS, CONFIG, METRICS, NUM_PARTITIONS, SCENARIO, SERVER_ROUND
from term_fl.clientapp.app import make_client_app
from term_fl.clientapp.cache import ClientCache
from term_fl.config import ConfigError, Scenario, config_hash, executor_of, load_scenario, with_overrides
from term_fl.learning import compiled_training
from term_fl.engines import cohort_executor as cohort_module
from term_fl.engines import batch_executor, run_scenario
from term_fl.engines.cohort_executor import CohortExecutor
from term_fl.engines.inprocess import InProcessGrid
from term_fl.federation.loop import Recorder, initial_arrays
from term_fl.results import ResultsStore
from term_fl.runs.run import run_one

REL = 1e-5
BATCHED = ("cohort", "compiled")


def _max_rel(want, got) -> float:
    """A device's weights as one vector: max |got - want| relative to max |want|."""
    want = np.concatenate([np.ravel(w) for w in want])
    got = np.concatenate([np.ravel(g) for g in got])
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-12))


class _Rounds(Recorder):
    def __init__(self) -> None:
        self.records = []

    def record_round(self, record) -> None:
        self.records.append(record)


def _vehicle(*overrides: str):
    path = vehicle_path()
    if path is None:
        pytest.skip("vehicle data not available")
    return load_scenario(None, ["data.name=vehicle", "model.name=linear_svm", "data.train_fraction=0.5",
                                "data.val_fraction=0.2", "data.test_fraction=0.3", *overrides],
                         environ={"TERM_FL_VEHICLE_DATA": str(path)})


SCENARIOS = {
    # the noisy-sensors settings (configs/noisy-sensors.toml): tau = -1, 2 epochs of batch 32
    "vehicle-svm-tau": lambda: _vehicle("client.tau=-1.0", "client.epochs=2", "client.lr=0.03", "client.batch_size=32",
                                        "client.weight_decay=0.001"),
    "synthetic-logreg-tau": lambda: small_scenario("client.tau=0.5", "client.epochs=3", "data.max_samples=80"),
    "synthetic-mlp": lambda: small_scenario("model.name=mlp", "model.hidden=16", "client.epochs=2",
                                            "client.batch_size=7"),
}


def _grid(n: int, executor: str) -> InProcessGrid:
    """A grid as run_scenario builds it: the ClientApp over a fresh cache, and the executor over the same."""
    cache = ClientCache()
    return InProcessGrid(make_client_app(cache), n, node_ids=range(1, n + 1),
                         executor=batch_executor(executor, cache))


def _exchange(scenario, kind: str, arrays: ArrayRecord, executor: str, server_round: int = 3):
    """Replies of every node to one message each (the round's shared record, as the strategies send it)."""
    n = scenario.data.synthetic.num_devices if scenario.data.name == "synthetic" else 23
    content = RecordDict({ARRAYS: arrays, CONFIG: ConfigRecord({SCENARIO: scenario.to_json(),
                                                                SERVER_ROUND: server_round})})
    with _grid(n, executor) as grid:
        messages = [Message(content, dst_node_id=node, message_type=kind) for node in range(1, n + 1)]
        replies = list(grid.send_and_receive(messages))
    assert [r.metadata.reply_to_message_id for r in replies] == [m.metadata.message_id for m in messages]
    return replies


@pytest.mark.parametrize("executor", BATCHED)
@pytest.mark.parametrize("name", SCENARIOS)
def test_one_round_of_replies_equals_the_clientapps(name, executor):
    """Every device's reply: same keys and integers, weights and losses within 1e-5 relative
    (uneven devices, some smaller than a batch; tau != 0; epochs > 1; the compiled executor's MLP
    on the cohort's torch path)."""
    scenario = SCENARIOS[name]()
    arrays = initial_arrays(scenario)
    for kind in (MessageType.TRAIN, MessageType.EVALUATE):
        sequential = _exchange(scenario, kind, arrays, "sequential")
        cohort = _exchange(scenario, kind, arrays, executor)
        assert len(sequential) == len(cohort) > 0
        for want, got in zip(sequential, cohort, strict=True):
            assert not got.has_error()
            assert list(got.content.keys()) == list(want.content.keys())
            want_m, got_m = want.content[METRICS], got.content[METRICS]
            assert list(got_m.keys()) == list(want_m.keys())
            for key, value in want_m.items():
                if isinstance(value, int):
                    assert got_m[key] == value, key
                else:  # abs 1e-6: a loss near 0 after training (7e-5) moves ~1e-3 relative with the
                    # reduction order (16 threads, torch 2.11: measured 9e-4); O(1) values stay at REL
                    assert got_m[key] == pytest.approx(value, rel=REL, abs=1e-6), key
            if kind == MessageType.TRAIN:
                w, g = from_array_record(want.content[ARRAYS]), from_array_record(got.content[ARRAYS])
                assert list(g) == list(w)
                assert all(g[k].dtype == w[k].dtype and g[k].shape == w[k].shape for k in w)
                assert _max_rel(w.values(), g.values()) <= REL


@pytest.mark.parametrize("batched", BATCHED)
@pytest.mark.parametrize("strategy", ["fedavg", "qffl", "term"])
def test_a_run_with_the_cohort_executor_records_what_the_sequential_one_records(strategy, batched):
    """Three rounds of each strategy: per-device F_k, tilted weights, evaluation and the global model agree."""
    runs = {}
    for executor in ("sequential", batched):
        scenario = small_scenario("run.engine=inprocess", f"run.executor={executor}", f"strategy.name={strategy}",
                                  "strategy.term.t=2", "client.tau=-0.5", "client.epochs=2")
        recorder = _Rounds()
        runs[executor] = (run_scenario(scenario, recorder), recorder.records)
    (seq_result, seq_rounds), (coh_result, coh_rounds) = runs["sequential"], runs[batched]
    assert len(seq_rounds) == len(coh_rounds) == 3
    for a, b in zip(seq_rounds, coh_rounds):
        assert [r["partition_id"] for r in a.train_rows] == [r["partition_id"] for r in b.train_rows]
        for ra, rb in zip(a.train_rows, b.train_rows):
            for key in ("train_loss", "train_loss_after", "tilted_weight"):
                assert rb[key] == pytest.approx(ra[key], rel=1e-4, abs=1e-7), key
        for ra, rb in zip(a.eval_rows, b.eval_rows):
            assert (ra["partition_id"], ra["split"], ra["examples"]) == (rb["partition_id"], rb["split"], rb["examples"])
            assert rb["loss"] == pytest.approx(ra["loss"], rel=1e-4)
    want, got = from_array_record(seq_result.arrays), from_array_record(coh_result.arrays)
    assert _max_rel(want.values(), got.values()) <= 1e-4


def test_summary_and_config_hash_record_the_executor(tmp_path):
    store = ResultsStore(tmp_path / "r.db")
    scenario = small_scenario("run.engine=inprocess", "run.executor=cohort", "run.rounds=1")
    recorder = run_one(scenario, store, out_dir=tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["executor"] == "cohort" and summary["status"] == "finished"
    assert summary["config_hash"] == config_hash(scenario) != config_hash(small_scenario("run.engine=inprocess"))
    assert store.get_run(recorder.run_id).status == "finished"
    store.close()


def test_the_sequential_executor_keeps_the_config_hashes_of_earlier_stores(monkeypatch):
    """A scenario hashes as it did before run.executor existed (a settings dump without the key)."""
    scenario = load_scenario(None, ["run.executor=sequential"], environ={})  # the default runs the cohort
    hashed = config_hash(scenario)
    dump = Scenario.model_dump

    def without_executor(self, *args, **kwargs):
        raw = dump(self, *args, **kwargs)
        del raw["run"]["executor"]
        return raw

    monkeypatch.setattr(Scenario, "model_dump", without_executor)
    assert config_hash(scenario) == hashed


def test_an_unknown_executor_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"run\.executor: Input should be 'auto', 'sequential', 'cohort' or 'compiled'"):
        load_scenario(None, ["run.executor=batched"], environ={})


def test_the_cohort_executor_on_the_flower_engine_is_a_clear_error():
    with pytest.raises(ConfigError, match=r"run.executor = 'cohort' needs run.engine = 'inprocess'"):
        run_scenario(small_scenario("run.engine=flower", "run.executor=cohort"))


def _two_round_arrays(executor: str) -> dict[str, np.ndarray]:
    scenario = small_scenario("run.engine=inprocess", f"run.executor={executor}", "run.rounds=2")
    return from_array_record(run_scenario(scenario).arrays)


def test_a_model_it_does_not_batch_falls_back_to_the_clientapp_said_once(monkeypatch, caplog):
    monkeypatch.setattr(cohort_module, "supports", lambda model: False)
    with caplog.at_level(logging.WARNING, logger="term_fl"):
        got = _two_round_arrays("cohort")
    warnings = [r.getMessage() for r in caplog.records if "cohort executor" in r.getMessage()]
    assert len(warnings) == 1 and "LogisticRegression (logreg) is not one of the built-in models" in warnings[0]
    want = _two_round_arrays("sequential")
    assert all(np.array_equal(got[k], want[k]) for k in want)  # the ClientApp itself ran


def test_a_failing_cohort_falls_back_to_the_clientapp_for_the_rest_of_the_run_said_once(monkeypatch, caplog):
    calls = []

    def broken(*args, **kwargs):
        calls.append(1)
        raise RuntimeError("out of memory")

    monkeypatch.setattr(cohort_module, "train_cohort", broken)
    with caplog.at_level(logging.WARNING, logger="term_fl"):
        got = _two_round_arrays("cohort")
    warnings = [r.getMessage() for r in caplog.records if "cohort executor" in r.getMessage()]
    assert warnings == ["cohort executor: a cohort failed (RuntimeError: out of memory); the rest of this run "
                        "trains client by client; falling back to the sequential executor"]
    assert len(calls) == 1  # round 2 did not try again
    want = _two_round_arrays("sequential")
    assert all(np.array_equal(got[k], want[k]) for k in want)


def test_without_numba_the_compiled_executor_trains_on_the_cohort_path_said_once(monkeypatch, caplog):
    """numba made unavailable (its import fails): the compiled executor gives the cohort executor's replies,
    bit for bit, and says so once."""
    monkeypatch.setitem(sys.modules, "numba", None)  # `import numba` raises ImportError
    monkeypatch.delitem(sys.modules, "term_fl.learning.linear_kernels", raising=False)
    compiled_training._kernels.cache_clear()
    monkeypatch.setattr(compiled_training, "_kernels", compiled_training._kernels)  # cleared again on undo
    try:
        assert not compiled_training.compiler_available()
        scenario, arrays = small_scenario(), initial_arrays(small_scenario())
        with caplog.at_level(logging.WARNING, logger="term_fl"):
            first = _exchange(scenario, MessageType.TRAIN, arrays, "compiled")
            _exchange(scenario, MessageType.TRAIN, arrays, "compiled")
        for want, got in zip(_exchange(scenario, MessageType.TRAIN, arrays, "cohort"), first, strict=True):
            assert dict(got.content[METRICS]) == dict(want.content[METRICS])
            w, g = from_array_record(want.content[ARRAYS]), from_array_record(got.content[ARRAYS])
            assert all(np.array_equal(w[k], g[k]) for k in w)
        said = [r.message for r in caplog.records if "numba is not installed" in r.message]
        assert len(said) == 2  # once per executor (each grid above has its own), not once per round
    finally:
        compiled_training._kernels.cache_clear()


def test_auto_is_the_compiled_executor_for_linear_models_in_process_and_hashes_as_it_runs():
    """run.executor = "auto" (the default) resolves by engine and model; a file that names an executor keeps
    its hash; auto on Flower's engine (sequential) hashes as the sequential executor always did."""
    auto = load_scenario(None, ["run.executor=auto", "run.engine=inprocess"], environ={})
    assert Scenario.model_fields["run"].default_factory().executor == "auto"
    assert executor_of(auto) == "compiled"
    assert config_hash(auto) == config_hash(with_overrides(auto, {"run.executor": "compiled"}))
    for model, engine, executor in (("mlp", "inprocess", "sequential"), ("logreg", "flower", "sequential"),
                                    ("linear_svm", "inprocess", "compiled")):
        scenario = with_overrides(auto, {"model.name": model, "run.engine": engine})
        assert executor_of(scenario) == executor
        pinned = with_overrides(scenario, {"run.executor": executor})
        assert config_hash(scenario) == config_hash(pinned)
    for name in ("sequential", "cohort"):
        pinned = with_overrides(auto, {"run.executor": name})
        assert executor_of(pinned) == name and config_hash(pinned) != config_hash(auto)


def test_messages_with_different_records_go_to_the_clientapp():
    scenario = small_scenario()
    one, two = initial_arrays(scenario), initial_arrays(scenario)
    config = ConfigRecord({SCENARIO: scenario.to_json(), SERVER_ROUND: 1})
    with serverapp_identity(run_id=1):
        messages = [Message(RecordDict({ARRAYS: arrays, CONFIG: config}), dst_node_id=node,
                            message_type=MessageType.TRAIN) for node, arrays in ((1, one), (2, two))]
    contexts = _grid(6, "sequential")._contexts
    assert CohortExecutor(ClientCache()).replies(messages, contexts) is None
    assert CohortExecutor(ClientCache()).replies(messages[:1], contexts) is not None


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("executor", BATCHED)
@pytest.mark.parametrize("name", ["synthetic-logreg-tau", "synthetic-mlp"])
def test_on_cuda_one_round_of_replies_equals_the_clientapps_on_cuda_and_on_the_cpu(name, executor):
    """client.device = cuda: the cohort stays on the GPU (the compiled executor on its torch path); its
    replies match the ClientApp's on the GPU and on the CPU (float32, other kernels: 1e-4 relative)."""
    from term_fl.config import with_overrides

    cpu = SCENARIOS[name]()
    gpu = with_overrides(cpu, {"client.device": "cuda"})
    arrays = initial_arrays(cpu)
    cohort = _exchange(gpu, MessageType.TRAIN, arrays, executor)
    for reference in (_exchange(gpu, MessageType.TRAIN, arrays, "sequential"),
                      _exchange(cpu, MessageType.TRAIN, arrays, "sequential")):
        for want, got in zip(reference, cohort, strict=True):
            w, g = from_array_record(want.content[ARRAYS]), from_array_record(got.content[ARRAYS])
            assert _max_rel(w.values(), g.values()) <= 1e-4
            # abs 1e-6: a loss near 0 (7e-5 after training) is exp(-margin)-sized, so a 1e-4 relative
            # difference in the margin moves it by ~margin x 1e-4 relative (measured 9e-4 on an H200)
            for key in ("train_loss_before", "train_loss_before_sum", "train_loss_after"):
                assert got.content[METRICS][key] == pytest.approx(want.content[METRICS][key], rel=1e-4, abs=1e-6)
    evaluated = _exchange(gpu, MessageType.EVALUATE, arrays, executor)
    for want, got in zip(_exchange(cpu, MessageType.EVALUATE, arrays, "sequential"), evaluated, strict=True):
        assert got.content[METRICS]["test_loss"] == pytest.approx(want.content[METRICS]["test_loss"], rel=1e-4)


@pytest.mark.parametrize("executor", [None, "cohort"])
@pytest.mark.parametrize("collecting", [True, False])
def test_the_grid_pauses_the_garbage_collector_only_while_it_answers_and_restores_it(executor, collecting):
    """A batch is answered with gc paused (speed), and gc is left as it was, also when a client fails."""
    import gc

    seen = []
    scenario = small_scenario()

    def client_app_that_looks(msg, context):
        seen.append(gc.isenabled())
        raise RuntimeError("boom")

    grid = InProcessGrid(client_app_that_looks, 2, node_ids=[1, 2],
                         executor=None if executor is None else CohortExecutor(ClientCache()))
    config = ConfigRecord({SCENARIO: scenario.to_json(), SERVER_ROUND: 1})
    was = gc.isenabled()
    try:
        gc.enable() if collecting else gc.disable()
        with grid:
            messages = [Message(RecordDict({CONFIG: config}), dst_node_id=n, message_type=MessageType.QUERY)
                        for n in (1, 2)]
            replies = list(grid.send_and_receive(messages))
        assert gc.isenabled() == collecting
    finally:
        gc.enable() if was else gc.disable()
    assert seen == [False, False] and all(r.has_error() for r in replies)


def test_a_batch_the_clientapp_would_refuse_gets_the_clientapps_error_replies():
    """A scenario that does not parse, or nodes whose partitions do not fit the dataset: the executor
    declines and each client answers with the ClientApp's own error, as without it."""
    scenario = small_scenario()
    arrays = initial_arrays(scenario)
    for scenario_json, num_partitions in (("{not json", 6), (scenario.to_json(), 7)):
        grid = _grid(6, "cohort")
        for context in grid._contexts.values():
            context.node_config[NUM_PARTITIONS] = num_partitions
        config = ConfigRecord({SCENARIO: scenario_json, SERVER_ROUND: 1})
        content = RecordDict({ARRAYS: arrays, CONFIG: config})
        with grid:
            replies = list(grid.send_and_receive(
                [Message(content, dst_node_id=n, message_type=MessageType.TRAIN) for n in range(1, 7)]))
        assert len(replies) == 6 and all(r.has_error() for r in replies)


def test_the_equivalence_tool_runs_a_sweep_with_both_executors_and_pairs_every_run(tmp_path, capsys):
    """`python -m benchmarks.cohort_equivalence CONFIG`: both sweeps run (term-fl sweep's code), every run of
    one is paired with its cell and seed in the other, and the report's numbers are those of the two stores."""
    from benchmarks import cohort_equivalence

    config = tmp_path / "tiny.toml"
    config.write_text(
        'name = "tiny"\n[run]\nrounds = 2\nclients_per_round = 3\n'
        '[data]\nnum_devices = 6\nmax_samples = 60\ntrain_fraction = 0.6\nval_fraction = 0.2\ntest_fraction = 0.2\n'
        '[client]\nbatch_size = 16\n'
        '[sweep]\n"strategy.name" = ["fedavg", "term"]\n"run.seed" = [0, 1]\n'
    )
    out = tmp_path / "eq"
    assert cohort_equivalence.main([str(config), "--out", str(out)]) == 0
    report = json.loads((out / "equivalence.json").read_text())
    assert report["runs_paired"] == 4  # 2 cells x 2 seeds
    assert set(report["sweep_wall_s"]) == {"sequential", "cohort"}
    assert len(report["rows"]) == 2 * len(cohort_equivalence.STATS)
    for row in report["rows"]:
        assert row["seeds"] == 2 and row["max_abs_diff"] >= abs(row["mean_diff"])
    # The paired numbers are the stores' own: compare() on the two folders gives the same report.
    again = cohort_equivalence.compare(out / "sequential", out / "cohort")
    assert again["rows"] == report["rows"]
    assert "runs paired" in capsys.readouterr().out
