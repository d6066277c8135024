"""The shared server loop on the in-process engine: recording, determinism, failures."""

from __future__ import annotations

import json

import numpy as np
import pytest
from flwr.clientapp import ClientApp

from conftest import small_scenario
from term_fl.clientapp.app import app as client_app
from term_fl.data import dataset_for
from term_fl.engines import run_scenario
from term_fl.engines.inprocess import InProcessGrid
from term_fl.maths.fairness import fairness_summary
from term_fl.maths.risks import loss_risks
from term_fl.federation.loop import FederationError, Recorder, run_federation
from term_fl.results import ResultsStore
from term_fl.runs.run import run_one
from term_fl.runs.run import load_model


def run_to_store(scenario, tmp_path, name="run"):
    store = ResultsStore(tmp_path / "results.db")
    recorder = run_one(scenario, store, out_dir=tmp_path / name)
    return store, recorder


def test_every_round_and_device_is_recorded(tiny, tmp_path):
    store, recorder = run_to_store(tiny, tmp_path)
    run = store.get_run(recorder.run_id)
    assert run.status == "finished" and run.rounds_completed == 3
    test = store.load_metrics(recorder.run_id, "test")
    # every device evaluated every round (evaluate_fraction = 1)
    assert len(test["round"]) == 3 * 6
    assert set(test["partition_id"].tolist()) == set(range(6))
    assert np.all((test["accuracy"] >= 0) & (test["accuracy"] <= 1))
    train = store.load_train(recorder.run_id)
    assert len(train["round"]) == 3 * 3  # 3 sampled devices per round
    assert np.all(train["included"])
    # TERM with lam = 1: the tilted weights of a round sum to 1
    for r in (1, 2, 3):
        assert train["tilted_weight"][train["round"] == r].sum() == pytest.approx(1.0, abs=1e-9)
    # the recorded round statistics equal fairness_summary of the recorded device rows
    last = test["round"] == 3
    expected = fairness_summary(test["accuracy"][last], num_examples=test["examples"][last],
                                correct=test["correct"][last])
    stats = store.load_round_stats(recorder.run_id, "test")[-1]
    for key in ("pooled_mean", "mean", "worst_10", "best_10", "std", "jain"):
        assert stats[key] == pytest.approx(expected[key], abs=1e-12)
    # loss risks of both splits in every round (their curves are curves), equal to loss_risks of the rows
    for split in ("val", "test"):
        metrics = store.load_metrics(recorder.run_id, split)
        for row in store.load_round_stats(recorder.run_id, split):
            risks = loss_risks(metrics["loss"][metrics["round"] == row["round"]], alpha=row["alpha"])
            for key in ("var", "cvar", "evar", "tivar"):
                assert row[key] == pytest.approx(risks[key], rel=1e-12), (split, row["round"], key)


def test_summary_json_follows_the_contract(tiny, tmp_path):
    _, recorder = run_to_store(tiny, tmp_path)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    for key in ("run_id", "status", "scenario", "engine", "strategy", "seed", "rounds_completed",
                "test", "validation", "versions", "data", "wall_time_s", "tilted_weights"):
        assert key in summary, key
    assert summary["strategy"]["name"] == "term" and "t" in summary["strategy"]
    for key in ("mean", "pooled_mean", "worst_10", "best_10", "std", "variance_1e4", "jain", "entropy",
                "gini", "min", "max", "K", "var", "cvar", "evar", "tivar", "alpha"):
        assert key in summary["test"], key
    assert set(summary["versions"]) >= {"term-fl", "flwr", "torch", "numpy"}
    assert sum(summary["tilted_weights"].values()) == pytest.approx(1.0)


def test_final_model_is_saved_and_loads_back(tiny, tmp_path):
    _, recorder = run_to_store(tiny, tmp_path)
    model = load_model(tmp_path / "run")
    device = dataset_for(tiny).device(0)
    import torch

    with torch.no_grad():
        predictions = model.predict(model(torch.from_numpy(device.x_test)))
    assert predictions.shape == (len(device.y_test),)
    with pytest.raises(FileNotFoundError, match="finished term-fl run directory"):
        load_model(tmp_path / "nope")


@pytest.mark.parametrize("strategy", ["fedavg", "qffl", "term"])
def test_same_seed_gives_identical_recorded_metrics(strategy, tmp_path):
    scenario = small_scenario("run.engine=inprocess", f"strategy.name={strategy}")
    store_a, a = run_to_store(scenario, tmp_path / "a")
    store_b, b = run_to_store(scenario, tmp_path / "b")
    for split in ("val", "test"):
        ma, mb = store_a.load_metrics(a.run_id, split), store_b.load_metrics(b.run_id, split)
        for key in ma:
            np.testing.assert_array_equal(ma[key], mb[key])
    ta, tb = store_a.load_train(a.run_id), store_b.load_train(b.run_id)
    for key in ta:
        np.testing.assert_array_equal(ta[key], tb[key])


def test_a_different_seed_samples_different_devices(tmp_path):
    a = small_scenario("run.engine=inprocess", "run.seed=1", "data.seed=0")
    b = small_scenario("run.engine=inprocess", "run.seed=2", "data.seed=0")
    store, ra = run_to_store(a, tmp_path / "a")
    store_b, rb = run_to_store(b, tmp_path / "b")
    assert not np.array_equal(store.load_train(ra.run_id)["partition_id"],
                              store_b.load_train(rb.run_id)["partition_id"])


def test_sampling_does_not_depend_on_node_ids(tiny):
    """Flower assigns random node ids: the same seed must pick the same partitions."""
    picks = []
    for node_ids in ([11, 22, 33, 44, 55, 66], [9, 7, 5, 3, 1, 100]):
        rec = ListRecorder()
        with InProcessGrid(client_app, 6, node_ids=node_ids) as grid:
            run_federation(grid, tiny, rec)
        picks.append([[r["partition_id"] for r in rnd.train_rows] for rnd in rec.rounds])
    assert picks[0] == picks[1]


class ListRecorder(Recorder):
    def __init__(self):
        self.rounds, self.status = [], None

    def record_round(self, record):
        self.rounds.append(record)

    def finish(self, status, result, error=None):
        self.status, self.error = status, error


def failing_client(fail_partitions: set[int]) -> ClientApp:
    """The real ClientApp, except that some partitions raise during training."""
    app = ClientApp()

    @app.query()
    def query(msg, context):
        return client_app(msg, context)

    @app.train()
    def train(msg, context):
        if int(context.node_config["partition-id"]) in fail_partitions:
            raise RuntimeError("sensor offline")
        return client_app(msg, context)

    @app.evaluate()
    def evaluate(msg, context):
        return client_app(msg, context)

    return app


def test_failing_clients_are_excluded_and_the_round_goes_on(tiny):
    rec = ListRecorder()
    with InProcessGrid(failing_client({0, 1, 2}), 6) as grid:
        run_federation(grid, tiny, rec)
    assert rec.status == "finished"
    excluded_somewhere = False
    for rnd in rec.rounds:
        sampled = {row["partition_id"] for row in rnd.train_rows}
        failed = {row["partition_id"] for row in rnd.train_rows if not row["included"]}
        assert failed == sampled & {0, 1, 2}
        # every failed device's reply is recorded as excluded, with its node and the reason
        recorded = [e for e in rnd.excluded if e["partition_id"] is not None]
        assert sorted(e["partition_id"] for e in recorded) == sorted(failed)
        assert all("sensor offline" in e["reason"] and e["node_id"] for e in recorded)
        excluded_somewhere |= bool(failed)
    assert excluded_somewhere  # the seed samples a failing device in some round: the check above is not vacuous


def test_rounds_without_valid_replies_stop_the_run_with_a_clear_error(tmp_path):
    scenario = small_scenario("run.engine=inprocess", "run.max_failed_rounds=2", "run.rounds=5")
    rec = ListRecorder()
    with (
        InProcessGrid(failing_client(set(range(6))), 6) as grid,
        pytest.raises(FederationError, match="2 consecutive rounds without a valid training reply"),
    ):
        run_federation(grid, scenario, rec)
    assert rec.status == "failed" and len(rec.rounds) == 2
    assert all(r.status == "failed" for r in rec.rounds)


def test_a_run_whose_every_round_failed_ends_failed_even_below_max_failed_rounds():
    """rounds=1 < max_failed_rounds=3: the one round failed, so nothing was learned and the run must say so."""
    scenario = small_scenario("run.engine=inprocess", "run.rounds=1")
    rec = ListRecorder()
    with (
        InProcessGrid(failing_client(set(range(6))), 6) as grid,
        pytest.raises(FederationError, match=r"every round failed \(1 of 1\)"),
    ):
        run_federation(grid, scenario, rec)
    assert rec.status == "failed" and [r.status for r in rec.rounds] == ["failed"]


def test_a_run_with_one_good_round_among_failed_ones_finishes():
    class FlakyGrid(InProcessGrid):
        """Every training reply of round 1 is an error; later rounds are fine."""

        def _deliver(self, msg):
            from flwr.app import Error, Message

            if msg.metadata.message_type == "train" and msg.content["config"]["server-round"] == 1:
                return Message(Error(code=2, reason="flaky"), reply_to=msg)
            return super()._deliver(msg)

    scenario = small_scenario("run.engine=inprocess", "run.rounds=2")
    rec = ListRecorder()
    with FlakyGrid(client_app, 6) as grid:
        run_federation(grid, scenario, rec)
    assert rec.status == "finished" and [r.status for r in rec.rounds] == ["failed", "ok"]


def test_a_failed_run_keeps_its_rounds_readable_and_is_marked(tmp_path, monkeypatch):
    scenario = small_scenario("run.engine=inprocess", "run.max_failed_rounds=1", "run.rounds=4")
    store = ResultsStore(tmp_path / "results.db")
    from term_fl.runs.run import RunRecorder

    recorder = RunRecorder(store, tmp_path / "run", run_id="failing-run")
    with (
        InProcessGrid(failing_client(set(range(6))), 6) as grid,
        pytest.raises(FederationError),
    ):
        run_federation(grid, scenario, recorder)
    run = store.get_run("failing-run")
    assert run.status == "failed" and "consecutive rounds" in run.error
    assert run.rounds_completed == 1
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "failed"


def test_missing_nodes_give_a_clear_error_not_a_hang():
    scenario = small_scenario("run.engine=inprocess", "run.node_timeout=0.5")
    grid = InProcessGrid(client_app, 4)  # the dataset has 6 devices
    with grid, pytest.raises(FederationError, match="only 4 of 6 expected nodes connected within 0.5 s"):
        run_federation(grid, scenario)


def test_run_scenario_uses_the_engine_the_scenario_names(tiny):
    result = run_scenario(tiny)
    assert result.rounds_completed == 3 and len(result.node_partitions) == 6


def test_summary_json_is_strict_json_even_with_infinite_risk_parameters(tiny, tmp_path):
    """EVaR's minimising t can be +inf; summary.json must still parse as standard JSON."""
    _, recorder = run_to_store(tiny, tmp_path)
    text = (tmp_path / "run" / "summary.json").read_text()
    assert "Infinity" not in text and "NaN" not in text
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))


class UnavailableNodeGrid(InProcessGrid):
    """Answers for partition 0's node as Flower's SuperLink does for an unavailable node:
    an error reply whose source is the SuperLink (node 1), not the node itself."""

    def _deliver(self, msg):
        from flwr.app import Error, Message

        if self._contexts[msg.metadata.dst_node_id].node_config["partition-id"] == 0 and \
                msg.metadata.message_type != "query":
            reply = Message(Error(code=5, reason="Node Unavailable"), reply_to=msg)
            reply.metadata.__dict__["_src_node_id"] = 1
            return reply
        return super()._deliver(msg)


def test_error_replies_sent_on_behalf_of_a_node_name_that_node(tiny, caplog):
    scenario = small_scenario("run.engine=inprocess", "run.clients_per_round=6")
    grid = UnavailableNodeGrid(client_app, 6)
    node_of_partition0 = next(n for n, c in grid._contexts.items() if c.node_config["partition-id"] == 0)
    rec = ListRecorder()
    with grid, caplog.at_level("WARNING", logger="flwr"):
        run_federation(grid, scenario, rec)
    for rnd in rec.rounds:
        assert {(e["node_id"], e["partition_id"]) for e in rnd.excluded} == {(node_of_partition0, 0)}
    assert f"excluding reply from node {node_of_partition0} (partition 0)" in caplog.text


def test_noisy_runs_report_the_clean_devices_separately(tmp_path):
    scenario = small_scenario("run.engine=inprocess", "data.noise=random_labels", "data.noisy_devices=[1, 4]")
    _, recorder = run_to_store(scenario, tmp_path)
    summary = recorder.summary
    assert summary["data"]["noise"]["devices"] == [1, 4]
    store = ResultsStore.open_readonly(tmp_path / "results.db")
    test = store.load_metrics(recorder.run_id, "test")
    clean = (test["round"] == 3) & ~np.isin(test["partition_id"], [1, 4])
    expected = fairness_summary(test["accuracy"][clean], num_examples=test["examples"][clean],
                                correct=test["correct"][clean])
    assert summary["test_clean"]["K"] == 4
    assert summary["test_clean"]["pooled_mean"] == pytest.approx(expected["pooled_mean"])
    val = store.load_metrics(recorder.run_id, "val")
    clean = (val["round"] == 3) & ~np.isin(val["partition_id"], [1, 4])
    assert summary["validation_clean"]["mean"] == pytest.approx(val["accuracy"][clean].mean())


def test_evaluate_every_evaluates_every_nth_round_and_always_the_last(tmp_path):
    scenario = small_scenario("run.engine=inprocess", "run.rounds=7", "run.evaluate_every=3")
    store, recorder = run_to_store(scenario, tmp_path)
    run_id = recorder.run_id
    assert [r["round"] for r in store.load_round_stats(run_id, "test")] == [3, 6, 7]
    assert sorted(set(store.load_metrics(run_id, "val")["round"].tolist())) == [3, 6, 7]
    assert sorted(set(store.load_train(run_id)["round"].tolist())) == list(range(1, 8))  # every round trains
    assert [r["round"] for r in store.load_rounds(run_id)] == list(range(1, 8))
    summary = recorder.summary
    assert summary["rounds_completed"] == 7 and summary["evaluated_round"] == 7
    assert summary["test"]["worst_10"] == store.load_round_stats(run_id, "test")[-1]["worst_10"]


def test_evaluating_less_often_leaves_the_trained_model_and_the_evaluated_rounds_unchanged(tmp_path):
    every = run_to_store(small_scenario("run.engine=inprocess", "run.rounds=4", "run.evaluate_every=2"),
                         tmp_path, name="every2")
    each = run_to_store(small_scenario("run.engine=inprocess", "run.rounds=4"), tmp_path, name="each")
    (store, a), (_, b) = every, each
    stats_a = {r["round"]: r for r in store.load_round_stats(a.run_id, "test")}
    stats_b = {r["round"]: r for r in store.load_round_stats(b.run_id, "test")}
    assert sorted(stats_a) == [2, 4] and sorted(stats_b) == [1, 2, 3, 4]
    for r in (2, 4):  # evaluation draws its own random stream: training does not depend on it
        assert stats_a[r]["mean"] == stats_b[r]["mean"] and stats_a[r]["worst_10"] == stats_b[r]["worst_10"]


def test_the_summary_says_how_much_the_validation_device_mean_moved_over_the_last_fifth(tmp_path):
    from term_fl.comparison.convergence import FLAT, last_fifth_change

    scenario = small_scenario("run.engine=inprocess", "run.rounds=10")
    store, recorder = run_to_store(scenario, tmp_path)
    rows = store.load_round_stats(recorder.run_id, "val")
    expected = last_fifth_change([r["round"] for r in rows], [r["mean"] for r in rows], 10)
    convergence = recorder.summary["convergence"]
    assert convergence["statistic"] == "validation device mean"
    assert convergence["last_fifth_change"] == pytest.approx(expected)
    assert convergence["flat"] == (abs(expected) <= FLAT)


def test_evaluate_every_must_be_a_positive_number_of_rounds():
    from term_fl.config import ConfigError

    with pytest.raises(ConfigError, match="run.evaluate_every: Input should be greater than or equal to 1"):
        small_scenario("run.evaluate_every=0")


class CrashingGrid(InProcessGrid):
    """Partition 1's node crashes when round 2's training is sent (gone from
    get_node_ids, its messages unanswerable) and comes back under a new node
    id after round 2, as a SuperNode that `restart: on-failure` started again."""

    def __init__(self, client_app, num_nodes, victim_partition=1):
        super().__init__(client_app, num_nodes)
        self.old = next(n for n, c in self._contexts.items() if c.node_config["partition-id"] == victim_partition)
        self.new = max(self._contexts) + 1
        self.batches: list[str] = []

    def push_messages(self, messages):
        messages = list(messages)
        kind = messages[0].metadata.message_type if messages else ""
        self.batches.append(kind)
        if kind == "train" and self.batches.count("train") == 2:
            self._crashed = self._contexts.pop(self.old)
        ids = super().push_messages(messages)
        if kind == "evaluate" and self.batches.count("evaluate") == 2:
            self._contexts[self.new] = self._crashed  # restarted: same partition, new node id
        return ids


def test_a_crashed_node_is_skipped_and_its_partition_rejoins_under_a_new_node_id(caplog):
    scenario = small_scenario("run.engine=inprocess", "run.clients_per_round=6", "run.rounds=4")
    grid = CrashingGrid(client_app, 6)
    rec = ListRecorder()
    with grid, caplog.at_level("WARNING", logger="term_fl"):
        result = run_federation(grid, scenario, rec)
    evaluated = [sorted({r["partition_id"] for r in rnd.eval_rows}) for rnd in rec.rounds]
    assert evaluated == [list(range(6)), [0, 2, 3, 4, 5], list(range(6)), list(range(6))]
    # round 2 sampled the node before it crashed: its update is excluded, the round goes on
    assert [e["partition_id"] for e in rec.rounds[1].excluded] == [1]
    assert all(r["included"] == 1 for rnd in rec.rounds[2:] for r in rnd.train_rows)
    assert result.node_partitions[grid.new] == 1 and grid.old not in result.node_partitions
    assert f"partition 1 is back: node {grid.new} replaces node {grid.old}" in caplog.text
    assert grid.batches.count("query") == 2  # discovery, then the newcomer only


def test_a_second_node_claiming_a_live_partition_is_ignored(caplog):
    scenario = small_scenario("run.engine=inprocess", "run.rounds=2")
    grid = InProcessGrid(client_app, 6)
    first = next(n for n, c in grid._contexts.items() if c.node_config["partition-id"] == 0)
    rec = ListRecorder()

    class LateDuplicate(Recorder):
        def record_round(self, record):
            rec.record_round(record)
            grid._contexts[max(grid._contexts) + 1] = grid._contexts[first]  # a second SuperNode, partition 0

    with grid, caplog.at_level("WARNING", logger="term_fl"):
        result = run_federation(grid, scenario, LateDuplicate())
    assert result.node_partitions[first] == 0 and len(result.node_partitions) == 6
    assert "also holds partition-id=0" in caplog.text


class CountingGrid(InProcessGrid):
    """The in-process grid, counting the query messages it delivers."""

    queries = 0

    def push_messages(self, messages):
        messages = list(messages)
        self.queries += sum(m.metadata.message_type == "query" for m in messages)
        return super().push_messages(messages)


def test_a_node_table_from_the_engine_replaces_the_partition_query():
    from term_fl.federation.loop import discover_nodes

    grid = CountingGrid(client_app, 6)
    table = {node_id: int(ctx.node_config["partition-id"]) for node_id, ctx in grid._contexts.items()}
    waited = []
    known = lambda timeout: waited.append(timeout) or table  # noqa: E731
    with grid:
        assert discover_nodes(grid, 6, timeout=30, known=known) == table
        assert grid.queries == 0 and 0 < waited[0] <= 30
        # without a table, or with one that does not match the connected nodes: every node is asked
        assert discover_nodes(grid, 6, timeout=30) == table and grid.queries == 6
        wrong = {node_id + 1: pid for node_id, pid in table.items()}
        assert discover_nodes(grid, 6, timeout=30, known=lambda t: wrong) == table and grid.queries == 12
        assert discover_nodes(grid, 6, timeout=30, known=lambda t: None) == table and grid.queries == 18


class FailingQueryGrid(CountingGrid):
    """The query to partition 2's node gets Flower's error reply for a ClientApp that missed its
    task-token / heartbeat window, ``fails`` times, then the node answers."""

    def __init__(self, client_app, num_nodes, fails):
        super().__init__(client_app, num_nodes)
        self.fails = fails
        self.slow = next(n for n, c in self._contexts.items() if c.node_config["partition-id"] == 2)

    def _deliver(self, msg):
        from flwr.app import Error, Message

        if msg.metadata.message_type == "query" and msg.metadata.dst_node_id == self.slow and self.fails > 0:
            self.fails -= 1
            return Message(Error(code=3, reason="ClientApp crashed"), reply_to=msg)
        return super()._deliver(msg)


def test_a_failed_partition_query_is_asked_again(caplog):
    from term_fl.federation.loop import QUERY_TRIES, discover_nodes

    grid = FailingQueryGrid(client_app, 6, fails=QUERY_TRIES - 1)
    table = {node_id: int(ctx.node_config["partition-id"]) for node_id, ctx in grid._contexts.items()}
    with grid, caplog.at_level("WARNING", logger="term_fl"):
        assert discover_nodes(grid, 6, timeout=30, poll_s=0.01) == table
    assert grid.queries == 6 + QUERY_TRIES - 1  # every node once, then the failed one alone
    assert f"asking 1 node(s) again for their partition: [{grid.slow}]" in caplog.text


def test_a_node_whose_query_always_fails_is_named_after_the_last_try():
    from term_fl.federation.loop import QUERY_TRIES, discover_nodes

    grid = FailingQueryGrid(client_app, 6, fails=QUERY_TRIES)
    with grid, pytest.raises(FederationError, match=r"5 of 6 partitions answered .* missing partition ids: \[2\]"):
        discover_nodes(grid, 6, timeout=30, poll_s=0.01)
    assert grid.queries == 6 + QUERY_TRIES - 1
