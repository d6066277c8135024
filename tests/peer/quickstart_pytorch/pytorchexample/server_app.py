"""pytorchexample: the ServerApp.

As in Flower's quickstart-pytorch, with the strategy taken from term-fl
(``strategy`` in the run config picks FedAvg, TermFedAvg or QFFL) and, for
the peer test, a JSON report of every round written to the run config's
``report`` path instead of ``final_model.pt``.
"""

import json

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp

from pytorchexample.task import Net, load_centralized_dataset, test
from term_fl.strategies import QFFL, FedAvg, TermFedAvg

app = ServerApp()
snapshots = []  # one per evaluate_fn call: round 0 (initial model), then after each round


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run the chosen strategy for num-server-rounds rounds."""
    fraction_evaluate: float = context.run_config["fraction-evaluate"]
    num_rounds: int = context.run_config["num-server-rounds"]
    lr: float = context.run_config["learning-rate"]
    name: str = context.run_config["strategy"]

    arrays = ArrayRecord(Net().state_dict())

    if name == "term":
        strategy = TermFedAvg(1.0, fraction_evaluate=fraction_evaluate)
    elif name == "qffl":
        strategy = QFFL(lr, fraction_evaluate=fraction_evaluate)
    else:
        strategy = FedAvg(fraction_evaluate=fraction_evaluate)

    result = strategy.start(
        grid=grid,
        initial_arrays=arrays,
        train_config=ConfigRecord({"lr": lr}),
        num_rounds=num_rounds,
        evaluate_fn=global_evaluate,
    )

    report = {
        "strategy": type(strategy).__name__,
        "snapshots": snapshots,
        "train_metrics": {str(r): dict(m) for r, m in result.train_metrics_clientapp.items()},
        "rounds": [
            {
                "server_round": h.server_round,
                "aggregated": len(h.node_ids),
                "excluded": [e.reason for e in h.excluded],
                "losses": [float(x) for x in h.losses],
                "weights": [float(x) for x in h.weights],
            }
            for h in strategy.history
        ],
    }
    with open(context.run_config["report"], "w", encoding="utf-8") as out:
        json.dump(report, out, indent=1)


def global_evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
    """Evaluate the global model on held-out data; remember what the peer test checks."""
    state = arrays.to_torch_state_dict()
    counter = arrays["bn1.num_batches_tracked"].numpy()
    snapshots.append(
        {
            "server_round": server_round,
            "num_batches_tracked": {"shape": list(counter.shape), "dtype": str(counter.dtype), "value": counter.tolist()},
            "shapes": {k: list(v.shape) for k, v in arrays.items()},
            "dtypes": {k: v.dtype for k, v in arrays.items()},
            "conv1_weight_sum": float(np.sum(arrays["conv1.weight"].numpy(), dtype=np.float64)),
            "bn1_running_mean_sum": float(np.sum(arrays["bn1.running_mean"].numpy(), dtype=np.float64)),
        }
    )
    model = Net()
    model.load_state_dict(state)
    loss, accuracy = test(model, load_centralized_dataset(), torch.device("cpu"))
    return MetricRecord({"accuracy": accuracy, "loss": loss})
