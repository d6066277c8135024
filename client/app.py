"""ClientApp for `flwr run .`: the same handlers every engine uses.

The Deployment Engine starts a fresh process for every message, so this
module imports only Flower: a train or evaluate message imports
term_fl.client_app (torch, the data, the model) when it arrives, and the
node-discovery query never does.
"""

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from term_fl.node_query import partition_reply

app = ClientApp()


@app.query()
def query(msg: Message, context: Context) -> Message:
    return partition_reply(msg, context)


@app.train()
def train(msg: Message, context: Context) -> Message:
    from term_fl.client_app import train_handler

    return train_handler(msg, context)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    from term_fl.client_app import evaluate_handler

    return evaluate_handler(msg, context)


__all__ = ["app"]
