"""The cohort executor of the in-process engine: a round's messages answered by one batched computation.

``run.executor = "cohort"`` hands each batch of train (or evaluate) messages
that the in-process Grid receives to :class:`CohortExecutor`, which trains
(or evaluates) every addressed device together with
:func:`term_fl.learning.cohort_training.train_cohort` (:func:`term_fl.learning.cohort_training.evaluate_cohort`)
and answers each message with the reply term-fl's ClientApp would send
(:func:`term_fl.clientapp.app.train_reply` / :func:`~term_fl.clientapp.app.evaluate_reply`):
same keys, same seeds per (run seed, round, partition-id), values equal to
float32 rounding. The Grid delivers a batch message by message, as with the
sequential executor, when the executor declines it: a model other than the
built-in ones (said once in the log), messages that do not share one
scenario and one global-model record, or a batch that fails as a whole (so
each failing client becomes its own error reply, as in Flower; the rest of
that run then goes message by message too, said once).

The executor works over the run's ClientCache (the same parsed scenario,
dataset and worker model as its ClientApp) and keeps every device's rows in
one tensor per split group on the client device (``client.device``; on CUDA
they stay there between rounds), built once per scenario.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message, MessageType, RecordDict

from term_fl.clientapp.app import (
    Setting,
    Workspace,
    evaluate_metric_columns,
    evaluate_reply,
    train_metric_columns,
    train_reply,
)
from term_fl.learning.compiled_training import CohortTraining
from term_fl.strategies.cohort_replies import CohortReplies
from term_fl.strategies.instructions import Instructions
from term_fl.strategies.stacked import StackedModels
from term_fl.learning.cohort_training import evaluate_cohort, supports, train_cohort
from term_fl.data import FederatedDataset
from term_fl.common.keys import ARRAYS, CONFIG, EVAL_SPLITS, NUM_PARTITIONS, PARTITION_ID, SCENARIO, SERVER_ROUND
from term_fl.learning.models import TermModel
from term_fl.common.seeding import derive_seeds
from term_fl.learning.training import EvalResult, as_tensors

log = logging.getLogger("term_fl")


@dataclass(frozen=True)
class FederationTensors:
    """Every device's splits as checked tensors on one torch device, devices one after another.

    Device k's training rows are ``x_train[train_starts[k] : train_starts[k] + train_sizes[k]]``;
    its evaluation rows (the splits of :data:`EVAL_SPLITS`, stacked in that
    order) start at ``eval_starts[k]`` with ``eval_sizes[k]`` rows per split.
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    train_starts: np.ndarray  # (D,)
    train_sizes: np.ndarray  # (D,)
    x_eval: torch.Tensor
    y_eval: torch.Tensor
    eval_starts: np.ndarray  # (D,)
    eval_sizes: np.ndarray  # (D, len(EVAL_SPLITS))

    @classmethod
    def build(cls, dataset: FederatedDataset, model: TermModel, device: torch.device) -> FederationTensors:
        """Every device of ``dataset`` checked against ``model`` (as the ClientApp checks one) and stacked."""
        devices = [dataset.device(k) for k in range(dataset.num_devices)]
        x_train, y_train = as_tensors(
            model, np.concatenate([d.x_train for d in devices]), np.concatenate([d.y_train for d in devices]), device
        )
        splits = [[d.split(name) for name in EVAL_SPLITS] for d in devices]
        x_eval, y_eval = as_tensors(
            model,
            np.concatenate([x for per_device in splits for x, _ in per_device]),
            np.concatenate([y for per_device in splits for _, y in per_device]),
            device,
        )
        train_sizes = np.array([len(d.y_train) for d in devices], dtype=np.int64)
        eval_sizes = np.array([[len(y) for _, y in per_device] for per_device in splits], dtype=np.int64)
        return cls(
            x_train=x_train,
            y_train=y_train,
            train_starts=np.cumsum(train_sizes) - train_sizes,
            train_sizes=train_sizes,
            x_eval=x_eval,
            y_eval=y_eval,
            eval_starts=np.cumsum(eval_sizes.sum(1)) - eval_sizes.sum(1),
            eval_sizes=eval_sizes,
        )


@dataclass(frozen=True)
class Answer:
    """A batch answered: the addressed partitions and their training (stacked) or their splits' evaluation."""

    pids: list[int]
    training: CohortTraining | None = None
    evaluation: list[list[EvalResult]] | None = None

    def messages(self, messages: Sequence[Message]) -> list[Message]:
        """One reply Message per message, as the ClientApp builds it."""
        if self.training is not None:
            return [train_reply(msg, pid, result)
                    for msg, pid, result in zip(messages, self.pids, self.training.results(), strict=True)]
        assert self.evaluation is not None
        return [evaluate_reply(msg, pid, results)
                for msg, pid, results in zip(messages, self.pids, self.evaluation, strict=True)]

    def stacked(self, node_ids: list[int]) -> CohortReplies:
        """The replies as one stacked record and one metric table (the ClientApp's keys, in its order)."""
        if self.training is not None:
            return CohortReplies(node_ids, train_metric_columns(self.pids, self.training),
                                 StackedModels(self.training.weights))
        assert self.evaluation is not None
        return CohortReplies(node_ids, evaluate_metric_columns(self.pids, self.evaluation))


@dataclass(frozen=True)
class Prepared:
    """A batch an executor answers, checked: its setting, the global model, the stacked devices, the partitions."""

    batch: Batch
    setting: Setting
    model: TermModel
    tensors: FederationTensors
    pids: list[int]

    @property
    def server_round(self) -> int:
        """The round a train batch belongs to (its config's ``server-round``)."""
        return int(self.batch.content[CONFIG][SERVER_ROUND])

    def replies(self, training: CohortTraining) -> CohortReplies:
        """The batch's replies from its training, as one stacked record and metric table."""
        return Answer(self.pids, training=training).stacked(self.batch.node_ids)


class CohortExecutor:
    """Answers a batch of train or evaluate messages for term-fl's ClientApp in one batched computation.

    Owned by one :class:`term_fl.engines.inprocess.InProcessGrid`. ``workspace``
    is the run's :class:`~term_fl.clientapp.cache.ClientCache`, shared
    with its ClientApp: the same parsed scenario, dataset and global-model
    worker. The executor keeps, per setting, every device's splits stacked
    (:class:`FederationTensors`), or that it declines the setting.
    """

    def __init__(self, workspace: Workspace) -> None:
        self._workspace = workspace
        self._tensors: weakref.WeakKeyDictionary[Setting, FederationTensors | None] = weakref.WeakKeyDictionary()
        self._declined: set[str] = set()  # reasons already logged

    def replies(self, messages: Sequence[Message], contexts: Mapping[int, Context]) -> list[Message] | None:
        """The replies to ``messages`` in their order, or None when the Grid should deliver them one by one."""
        answer = self._answer(_batch_of(messages), contexts)
        return None if answer is None else answer.messages(messages)

    def cohort_replies(self, messages: Sequence[Message], contexts: Mapping[int, Context]) -> CohortReplies | None:
        """The replies to ``messages`` as one stacked record and one metric table (row k answers message k), or
        None when the Grid should deliver them one by one.

        ``messages`` may be :class:`~term_fl.strategies.instructions.Instructions`:
        their shared content and node ids are read without building a Message.
        """
        batch = _batch_of(messages)
        answer = self._answer(batch, contexts)
        return None if answer is None or batch is None else answer.stacked(batch.node_ids)

    def prepare_training(self, messages: Sequence[Message], contexts: Mapping[int, Context]) -> Prepared | None:
        """A train batch checked and ready to compute (its setting, global model, tensors, partitions), or None
        when the executor would not answer it (a group trains several runs' prepared batches at once)."""
        prepared = self._prepare(_batch_of(messages), contexts)
        return prepared if prepared is not None and prepared.batch.kind == MessageType.TRAIN else None

    def use_tensors(self, setting: Setting, tensors: FederationTensors) -> None:
        """Keep ``tensors`` as the setting's stacked devices (a group hands its runs views of one shared array)."""
        self._tensors[setting] = tensors

    def failed(self, prepared: Prepared, exc: BaseException) -> None:
        """A prepared batch whose computation failed: the rest of its run goes client by client, said once."""
        self._fail(prepared.setting, exc)

    def _fail(self, setting: Setting, exc: BaseException) -> None:
        self._tensors[setting] = None  # no failing cohort per round
        self._decline(f"a cohort failed ({type(exc).__name__}: {exc}); the rest of this run trains "
                      "client by client")

    def _answer(self, batch: Batch | None, contexts: Mapping[int, Context]) -> Answer | None:
        """The batch's training or evaluation, or None when the Grid should deliver it message by message."""
        prepared = self._prepare(batch, contexts)
        if prepared is None:
            return None
        try:
            if prepared.batch.kind == MessageType.TRAIN:
                return Answer(prepared.pids, training=self._training(
                    prepared.setting, prepared.model, prepared.tensors, prepared.pids, prepared.server_round))
            return Answer(prepared.pids, evaluation=self._evaluate(
                prepared.setting, prepared.model, prepared.tensors, prepared.pids))
        except Exception as exc:  # a client's failure becomes its own error reply on the sequential path
            self.failed(prepared, exc)
            return None

    def _prepare(self, batch: Batch | None, contexts: Mapping[int, Context]) -> Prepared | None:
        """What the batch needs computed, or None when the Grid should deliver it message by message."""
        if batch is None or batch.kind not in (MessageType.TRAIN, MessageType.EVALUATE) or any(
            node not in contexts for node in batch.node_ids
        ):
            return None
        if batch.scenario_json is None or batch.arrays is None:
            self._decline("the messages of a batch do not share one scenario and one global-model record")
            return None
        try:
            setting = self._workspace.setting(batch.scenario_json)
            num_devices = setting.dataset.num_devices
            configs = [contexts[node].node_config for node in batch.node_ids]
            pids = [int(config[PARTITION_ID]) for config in configs]
        except Exception:  # noqa: BLE001 - the ClientApp turns it into each client's error reply
            return None
        if any(not 0 <= pid < num_devices or int(c.get(NUM_PARTITIONS, num_devices)) != num_devices
               for pid, c in zip(pids, configs)):
            return None  # the ClientApp reports the partition that does not fit, client by client
        if self._tensors.get(setting, False) is None:
            return None
        try:
            model = self._workspace.model(setting, batch.arrays, training=False)  # not changed by the cohort
            tensors = self._tensors_of(setting, model)
            if tensors is None:
                return None
            return Prepared(batch, setting, model, tensors, pids)
        except Exception as exc:  # a client's failure becomes its own error reply on the sequential path
            self._fail(setting, exc)
            return None

    # -- the two kinds of batch ------------------------------------------------------
    def _training(
        self, setting: Setting, model: TermModel, tensors: FederationTensors, pids: list[int], server_round: int
    ) -> CohortTraining:
        """Each addressed device's training, as the ClientApp's ``train_tensors`` would report it."""
        scenario = setting.scenario
        c = scenario.client
        return CohortTraining.stack(train_cohort(
            model,
            tensors.x_train,
            tensors.y_train,
            tensors.train_starts[pids],
            tensors.train_sizes[pids],
            lr=c.lr,
            epochs=c.epochs,
            batch_size=c.batch_size,
            weight_decay=c.weight_decay,
            tau=c.tau,
            seeds=derive_seeds(scenario.run.seed, server_round, pids),
        ))

    @staticmethod
    def _evaluate(
        setting: Setting, model: TermModel, tensors: FederationTensors, pids: list[int],
    ) -> list[list[EvalResult]]:
        """Each addressed device's splits (:data:`EVAL_SPLITS`) evaluated, as the ClientApp reports them."""
        splits = len(EVAL_SPLITS)
        sizes = tensors.eval_sizes[pids]
        if pids == list(range(len(tensors.eval_sizes))):
            x, y = tensors.x_eval, tensors.y_eval
        else:
            starts = tensors.eval_starts[pids]
            rows = np.concatenate([np.arange(s, s + n) for s, n in zip(starts, sizes.sum(1))])
            index = torch.from_numpy(rows).to(setting.device)
            x, y = tensors.x_eval.index_select(0, index), tensors.y_eval.index_select(0, index)
        results = evaluate_cohort(model, x, y, np.cumsum(sizes.reshape(-1)).tolist())
        return [results[i * splits : (i + 1) * splits] for i in range(len(pids))]

    # -- what the executor keeps per setting --------------------------------------------
    def _tensors_of(self, setting: Setting, model: TermModel) -> FederationTensors | None:
        if setting in self._tensors:
            return self._tensors[setting]
        tensors = None
        if not supports(model):
            self._decline(
                f"model {type(model).__name__} ({setting.scenario.model.name}) is not one of the built-in models "
                "it batches; its clients train one after another"
            )
        else:
            try:
                tensors = FederationTensors.build(setting.dataset, model, setting.device)
            except (ValueError, RuntimeError) as exc:
                self._decline(f"the devices' data cannot be stacked ({exc})")
        self._tensors[setting] = tensors
        return tensors

    def _decline(self, reason: str) -> None:
        if reason not in self._declined:
            self._declined.add(reason)
            log.warning("cohort executor: %s; falling back to the sequential executor", reason)


class Batch(NamedTuple):
    """What a batch of messages asks: its kind, its nodes, and the content they share (None where they do not)."""

    kind: str
    node_ids: list[int]
    content: RecordDict
    scenario_json: str | None
    arrays: ArrayRecord | None


def _batch_of(messages: Sequence[Message]) -> Batch | None:
    """The batch ``messages`` form, or None when they are not one kind of message."""
    if isinstance(messages, Instructions):
        return Batch(messages.message_type, messages.node_ids, messages.content, *_scenario_and_model(
            messages.content))
    if not messages:
        return None
    kind = messages[0].metadata.message_type
    if any(m.metadata.message_type != kind for m in messages):
        return None
    first = messages[0].content
    scenario_json, arrays = _scenario_and_model(first)
    for msg in messages[1:]:
        content = msg.content
        if content is first:
            continue
        other_json, other_arrays = _scenario_and_model(content)
        if other_arrays is not arrays or other_json != scenario_json:
            scenario_json = arrays = None
            break
    return Batch(kind, [m.metadata.dst_node_id for m in messages], first, scenario_json, arrays)


def _scenario_and_model(content: RecordDict) -> tuple[str | None, ArrayRecord | None]:
    """The scenario JSON and the global-model record a message carries, (None, None) without them."""
    try:
        return str(content[CONFIG][SCENARIO]), content[ARRAYS]
    except KeyError:
        return None, None
