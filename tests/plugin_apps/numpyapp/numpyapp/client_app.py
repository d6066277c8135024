"""numpyapp: A Flower / NumPy app."""

import numpy as np
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from numpyapp.task import load_data, loss_fn  # term-fl test
from term_fl.clientapp.node_query import partition_reply  # term-fl: AFL
from term_fl.plugin import train_metrics  # term-fl: F_k
from term_fl.plugin.numpy_loss import pre_training_loss  # term-fl: F_k

# Flower ClientApp
app = ClientApp()
app.query()(partition_reply)  # term-fl: AFL (the server asks each node for its partition-id)


@app.train()
def train(msg: Message, context: Context):
    """Train the model on local data."""

    # The model is the global arrays
    ndarrays = msg.content["arrays"].to_numpy_ndarrays()
    partition_id = context.node_config["partition-id"]  # term-fl test
    loss_before = pre_training_loss(ndarrays, [load_data(partition_id)], loss_fn)  # term-fl: F_k

    # Simulate local training (here we just add random noise to model parameters)
    rng = np.random.default_rng([partition_id, msg.content["config"]["server-round"]])  # term-fl test: seeded
    model = [m + rng.random(m.shape) for m in ndarrays]  # term-fl test: seeded

    # Construct and return reply Message
    model_record = ArrayRecord(model)
    metrics = {
        "random_metric": np.random.rand(),
        "num-examples": 1,
        **train_metrics(loss_before, partition_id=partition_id),  # term-fl: F_k (partition-id for AFL)
    }
    metric_record = MetricRecord(metrics)
    content = RecordDict({"arrays": model_record, "metrics": metric_record})
    return Message(content=content, reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context):
    """Evaluate the model on local data."""

    # The model is the global arrays
    ndarrays = msg.content["arrays"].to_numpy_ndarrays()

    # Return reply Message
    metrics = {
        "random_metric": np.random.rand(3).tolist(),
        "num-examples": 1,
    }
    metric_record = MetricRecord(metrics)
    content = RecordDict({"metrics": metric_record})
    return Message(content=content, reply_to=msg)
