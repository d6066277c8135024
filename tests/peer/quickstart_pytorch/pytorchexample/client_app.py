"""pytorchexample: the ClientApp.

As in Flower's quickstart-pytorch, plus the two lines marked ``term-fl``:
the loss of the received global model on the training data, measured before
local training, sent as ``train_loss_before`` (what TermFedAvg and QFFL read).
``train_loss`` keeps Flower's meaning: the mean loss during local training.
"""

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from pytorchexample.task import Net, load_data
from pytorchexample.task import test as test_fn
from pytorchexample.task import train as train_fn
from term_fl.client import pre_training_loss

app = ClientApp()


@app.train()
def train(msg: Message, context: Context):
    """Load the received weights, train on the local data, reply with the new weights."""
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    model.to(device)

    partition_id = context.node_config["partition-id"]
    num_partitions = context.node_config["num-partitions"]
    trainloader, _ = load_data(partition_id, num_partitions, context.run_config["batch-size"])

    loss_before = pre_training_loss(model, trainloader, torch.nn.CrossEntropyLoss(), keys=("img", "label"))  # term-fl
    train_loss = train_fn(model, trainloader, context.run_config["local-epochs"], msg.content["config"]["lr"], device)

    metrics = {
        "train_loss": train_loss,
        "num-examples": len(trainloader.dataset),
        "train_loss_before": loss_before,  # term-fl
    }
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": MetricRecord(metrics)})
    return Message(content=content, reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context):
    """Evaluate the received weights on the local test data."""
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    model.to(device)

    partition_id = context.node_config["partition-id"]
    num_partitions = context.node_config["num-partitions"]
    _, testloader = load_data(partition_id, num_partitions, context.run_config["batch-size"])
    eval_loss, eval_acc = test_fn(model, testloader, device)

    metrics = {"eval_loss": eval_loss, "eval_acc": eval_acc, "num-examples": len(testloader.dataset)}
    return Message(content=RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)
