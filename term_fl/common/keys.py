"""The names that the server, the clients, the store and the reports share.

One home for the contract of docs/contracts.md ('Messages'): the record keys of a
Message, the metric keys of the clients' replies, the node-config keys of a
SuperNode, and the names of the data splits.
"""

from __future__ import annotations

# -- records of a Message ------------------------------------------------------
ARRAYS = "arrays"  # the model (ArrayRecord)
CONFIG = "config"  # the instruction's settings (ConfigRecord)
METRICS = "metrics"  # a reply's numbers (MetricRecord)

# -- ConfigRecord keys of an instruction ----------------------------------------
SCENARIO = "scenario"  # the resolved scenario as one JSON string
SERVER_ROUND = "server-round"

# -- node config of a SuperNode, and the metric keys every reply carries --------
PARTITION_ID = "partition-id"
NUM_PARTITIONS = "num-partitions"
NUM_EXAMPLES = "num-examples"

# -- training replies -----------------------------------------------------------
# F_k: loss of the received global model on the train split, before local
# training (tau-tilted when tau != 0). Not "train_loss": Flower's examples send
# that key as the mean loss *during* local training, another quantity.
TRAIN_LOSS_BEFORE = "train_loss_before"
TRAIN_LOSS_BEFORE_SUM = "train_loss_before_sum"  # the same loss summed over the device's samples
TRAIN_LOSS_AFTER = "train_loss_after"  # mean train loss after local training

# -- data splits ------------------------------------------------------------------
TRAIN, VAL, TEST = "train", "val", "test"
DATA_SPLITS = (TRAIN, VAL, TEST)  # every device's splits
EVAL_SPLITS = (VAL, TEST)  # the splits the global model is evaluated on (and the store keeps)
SUMMARY_NAMES = {VAL: "validation", TEST: "test"}  # their names in summary.json and comparisons
EVAL_QUANTITIES = ("loss", "accuracy", "correct", "examples")


def eval_key(split: str, quantity: str) -> str:
    """Metric key of an evaluation reply: ``val_loss``, ``test_accuracy`` ..."""
    return f"{split}_{quantity}"


EVAL_METRICS = tuple(eval_key(split, q) for split in EVAL_SPLITS for q in EVAL_QUANTITIES)
