"""ClientApp for `flwr run .`: the handlers every engine uses, over this process's client cache.

The Deployment Engine starts a fresh process for every message, so this
module imports only Flower. A train or evaluate message of a linear model
whose clients train on the CPU is answered without torch
(term_fl.clientapp.linear_app: numpy, the same replies to float32
rounding; TERM_FL_CLIENTAPP=torch turns it off); any other imports
term_fl.clientapp.app (torch, the data, the model) when it arrives. The
node-discovery query imports neither. Flower's Simulation Engine keeps its
ClientApp processes, and with them the cache (term_fl.clientapp.cache).
"""

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from term_fl.clientapp.node_query import partition_reply

app = ClientApp()


@app.query()
def query(msg: Message, context: Context) -> Message:
    return partition_reply(msg, context)


@app.train()
def train(msg: Message, context: Context) -> Message:
    from term_fl.clientapp import linear_app

    if linear_app.answers(msg):
        return linear_app.train(msg, context)
    from term_fl.clientapp.app import train as train_handler
    from term_fl.clientapp.cache import process_cache

    return train_handler(msg, context, process_cache())


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    from term_fl.clientapp import linear_app

    if linear_app.answers(msg):
        return linear_app.evaluate(msg, context)
    from term_fl.clientapp.app import evaluate as evaluate_handler
    from term_fl.clientapp.cache import process_cache

    return evaluate_handler(msg, context, process_cache())


__all__ = ["app"]
