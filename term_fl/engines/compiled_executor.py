"""The compiled executor of the in-process engine: the cohort executor with the linear models' SGD compiled.

``run.executor = "compiled"`` (the in-process engine's default for the linear
SVM and logistic regression, ``run.executor = "auto"``) answers a round's
messages as :class:`~term_fl.engines.cohort_executor.CohortExecutor` does,
and trains a linear model's cohort with
:func:`term_fl.learning.compiled_training.train_compiled`: every device's
local SGD in one compiled kernel on the CPU. Where the kernel does not apply
(the MLP, clients on CUDA, numba not installed) the round trains on the
cohort's batched torch path instead, said once in the log: the same
replies to float32 rounding either way.
"""

from __future__ import annotations

import logging

from term_fl.clientapp.app import Setting
from term_fl.common.seeding import derive_seeds
from term_fl.engines.cohort_executor import CohortExecutor, FederationTensors, Prepared
from term_fl.learning.compiled_training import (
    CohortTraining,
    CompiledTask,
    compiler_available,
    supports,
    train_compiled,
)
from term_fl.learning.models import TermModel

log = logging.getLogger("term_fl")

__all__ = ["CompiledExecutor"]


class CompiledExecutor(CohortExecutor):
    """A :class:`CohortExecutor` whose linear models train in one compiled kernel per round."""

    def _training(
        self, setting: Setting, model: TermModel, tensors: FederationTensors, pids: list[int], server_round: int
    ) -> CohortTraining:
        reason = _why_not_compiled(model, setting)
        if reason is not None:
            self._say_once(f"compiled executor: {reason}; training with the cohort executor's torch path "
                           "(the same replies to float32 rounding)")
            return super()._training(setting, model, tensors, pids, server_round)
        scenario = setting.scenario
        c = scenario.client
        return train_compiled(
            model,
            tensors.x_train.numpy(),
            tensors.y_train.numpy(),
            tensors.train_starts[pids],
            tensors.train_sizes[pids],
            lr=c.lr,
            epochs=c.epochs,
            batch_size=c.batch_size,
            weight_decay=c.weight_decay,
            tau=c.tau,
            seeds=derive_seeds(scenario.run.seed, server_round, pids),
        )

    def compiled_task(self, prepared: Prepared, offset: int = 0) -> CompiledTask | None:
        """A prepared train batch as a task of :func:`train_compiled_group` (its rows ``offset`` further on in
        the group's shared rows), or None where the kernel does not apply."""
        if _why_not_compiled(prepared.model, prepared.setting) is not None:
            return None
        tensors, pids = prepared.tensors, prepared.pids
        seeds = derive_seeds(prepared.setting.scenario.run.seed, prepared.server_round, pids)
        return CompiledTask(prepared.model, offset + tensors.train_starts[pids], tensors.train_sizes[pids], seeds)

    def _say_once(self, line: str) -> None:
        if line not in self._declined:
            self._declined.add(line)
            log.warning(line)


def _why_not_compiled(model: TermModel, setting: Setting) -> str | None:
    """Why the compiled kernel cannot train this setting's clients, or None when it can."""
    if not compiler_available():
        return "numba is not installed (pip install 'term-fl[fast]')"
    if not supports(model, setting.device):
        if setting.device.type != "cpu":
            return f"its kernel runs on the CPU and the clients train on {setting.device}"
        return f"it compiles the linear models, not {setting.scenario.model.name}"
    return None
