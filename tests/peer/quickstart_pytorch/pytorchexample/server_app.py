"""pytorchexample: A Flower / PyTorch app."""

import json  # term-fl peer test: the report

import numpy as np  # term-fl peer test: the report
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp

from pytorchexample.task import Net, load_centralized_dataset, test
from term_fl.strategies import QFFL, FedAvg, TermFedAvg  # term-fl

# Create ServerApp
app = ServerApp()
snapshots = []  # term-fl peer test: the global model before round 1 and after each round


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Main entry point for the ServerApp."""

    # Read run config
    fraction_evaluate: float = context.run_config["fraction-evaluate"]
    num_rounds: int = context.run_config["num-server-rounds"]
    lr: float = context.run_config["learning-rate"]
    name: str = context.run_config["strategy"]  # term-fl peer test: "fedavg", "term" or "qffl"

    # Load global model
    global_model = Net()
    arrays = ArrayRecord(global_model.state_dict())

    # Initialize the strategy (term-fl)
    if name == "term":
        strategy = TermFedAvg(1.0, fraction_evaluate=fraction_evaluate)  # t = 1
    elif name == "qffl":
        strategy = QFFL(lr, fraction_evaluate=fraction_evaluate)  # q = 0.1
    else:
        strategy = FedAvg(fraction_evaluate=fraction_evaluate)

    # Start strategy, run FedAvg for `num_rounds`
    result = strategy.start(
        grid=grid,
        initial_arrays=arrays,
        train_config=ConfigRecord({"lr": lr}),
        num_rounds=num_rounds,
        evaluate_fn=global_evaluate,
    )

    # term-fl peer test: a report of every round instead of final_model.pt
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
    """Evaluate model on central data."""

    # term-fl peer test: what the test checks of the global model
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

    # Load the model and initialize it with the received weights
    model = Net()
    model.load_state_dict(arrays.to_torch_state_dict())
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    model.to(device)

    # Load entire test set
    test_dataloader = load_centralized_dataset()

    # Evaluate the global model on the test set
    test_loss, test_acc = test(model, test_dataloader, device)

    # Return the evaluation metrics
    return MetricRecord({"accuracy": test_acc, "loss": test_loss})
