"""jaxapp: A Flower / JAX app."""

import json  # term-fl test
import os  # term-fl test

import numpy as np
from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp import strategy as flower_strategies  # term-fl test

from jaxapp.task import get_params, load_model
from term_fl.common.jsonable import plain  # term-fl test
from term_fl.federation.discovery import discover_nodes  # term-fl: AFL
from term_fl.strategies import build_strategy  # term-fl

# Create ServerApp
app = ServerApp()


def main(grid: Grid, context: Context) -> None:
    """Main entry point for the ServerApp."""

    # Read from config
    num_rounds = context.run_config["num-server-rounds"]
    input_dim = context.run_config["input-dim"]

    # Load global model
    model = load_model((input_dim,))
    arrays = ArrayRecord(get_params(model))

    # Initialize FedAvg strategy
    strategy = make_strategy(grid, context)  # term-fl

    # Start strategy, run FedAvg for `num_rounds`
    result = strategy.start(
        grid=grid,
        initial_arrays=arrays,
        num_rounds=num_rounds,
    )

    # Save final model to disk
    print("\nSaving final model to disk...")
    ndarrays = result.arrays.to_numpy_ndarrays()
    np.savez("final_model.npz", *ndarrays)


# term-fl test: the template's main() once per strategy of the run config, each from the same initial model
BUILT = []  # term-fl test: the strategies main() built, in order


def make_strategy(grid: Grid, context: Context, **template_kwargs):  # term-fl test: the one the run config names
    name, kwargs = json.loads(context.run_config["strategy"])  # term-fl test
    if name.startswith("flower:"):  # term-fl test: Flower's own FedAvg or QFedAvg, for the equivalence
        strategy = getattr(flower_strategies, name[len("flower:"):])(**kwargs, **template_kwargs)  # term-fl test
    else:  # term-fl test
        strategy = build_strategy(name, **kwargs, **template_kwargs)  # term-fl test
    if name == "afl":  # term-fl test: AFL weights by partition, it needs the table
        strategy.set_node_partitions(discover_nodes(grid, context.run_config["num-partitions"], timeout=120))  # term-fl: AFL
    BUILT.append(strategy)  # term-fl test
    return strategy  # term-fl test


@app.main()  # term-fl test
def main_each(grid: Grid, context: Context) -> None:  # term-fl test
    """Run the template's main() for each strategy, in a folder of its own (its final model lands there)."""  # term-fl test
    for label, name, kwargs, rounds in json.loads(context.run_config["strategies"]):  # term-fl test
        folder = os.path.join(context.run_config["report-dir"], label)  # term-fl test
        os.makedirs(folder)  # term-fl test
        os.chdir(folder)  # term-fl test
        context.run_config["strategy"] = json.dumps([name, kwargs])  # term-fl test
        context.run_config["num-server-rounds"] = rounds  # term-fl test
        main(grid, context)  # term-fl test
        with open("history.json", "w", encoding="utf-8") as out:  # term-fl test: term-fl's round reports
            json.dump(plain(getattr(BUILT[-1], "history", [])), out)  # term-fl test
