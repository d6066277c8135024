"""The README's code example runs as written, against real Flower Messages."""

from __future__ import annotations

import re

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from conftest import REPO
from term_fl.engines.inprocess import InProcessGrid


def readme_example() -> str:
    text = (REPO / "README.md").read_text()
    block = re.search(r"<!-- readme-example:start -->\s*```python\n(.*?)```", text, re.S)
    assert block, "README example markers not found"
    return block.group(1)


def toy_client() -> ClientApp:
    """A user's own ClientApp: moves w towards its partition id; loss = distance before training."""
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        pid = int(context.node_config["partition-id"])
        w = msg.content["arrays"]["w"].numpy()
        target = np.full_like(w, float(pid))
        loss = float(np.mean((w - target) ** 2))
        new = w + 0.5 * (target - w)
        metrics = MetricRecord({"num-examples": 10 + pid, "train_loss": loss, "partition-id": pid})
        return Message(RecordDict({"arrays": ArrayRecord({"w": Array(new)}), "metrics": metrics}), reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        return Message(RecordDict({"metrics": MetricRecord({"num-examples": 1})}), reply_to=msg)

    return app


def test_readme_example_runs_and_reports_tilted_weights_that_sum_to_one(capsys):
    namespace: dict = {}
    exec(compile(readme_example(), "README.md", "exec"), namespace)
    grid = InProcessGrid(toy_client(), 4)
    context = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})
    namespace["app"](grid, context)
    strategy_weights = re.search(r"tilted weights of the last round: \[(.*?)\]", capsys.readouterr().out, re.S)
    weights = np.array([float(x) for x in strategy_weights.group(1).split()])
    assert len(weights) == 2 and abs(weights.sum() - 1) < 1e-9  # fraction_train=0.5 of 4 nodes
    final = context.state["final"]["w"].numpy()
    assert final.shape == (3,) and np.all(np.isfinite(final))
