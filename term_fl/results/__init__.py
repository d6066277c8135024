"""The results store: every run, every round, every device, in one SQLite file.

Modules: :mod:`.schema` (tables, versions and their migrations),
:mod:`.store` (:class:`ResultsStore`: opening, transactions), :mod:`.writes`
and :mod:`.reads` (its writing and reading methods), :mod:`.rows` (the rows
and their conversion to and from SQL and JSON), :mod:`.errors`.

The server loop writes it, the dashboard and the CLI read it. It is plain
stdlib ``sqlite3`` in WAL mode, so readers (other threads or processes, e.g.
:meth:`ResultsStore.open_readonly`) never block the writer and never see a
half-written round.

Tables (``PRAGMA user_version`` holds :data:`SCHEMA_VERSION`,
``PRAGMA application_id`` marks the file as a term-fl store):

``runs``
    One row per run: ``run_id``, ``name``, ``scenario``, ``engine``,
    ``strategy`` with ``strategy_params_json``, ``seed``, ``config_hash`` (the
    hash of the resolved config without the seed: it groups the seeds of one
    sweep cell), ``config_json``, ``data_json`` (name, path, sha256),
    ``status`` (running | finished | failed | interrupted), ``error``,
    ``rounds_planned``, ``rounds_completed``, ``started_at``, ``finished_at``
    (Unix seconds), ``run_dir``, ``summary_json``, ``heartbeat_at`` (Unix
    seconds: the writer's last sign of life, every round and every
    :data:`HEARTBEAT_S` seconds; schema version 2).
``rounds``
    One row per recorded round: ``status`` (ok | failed), ``num_sampled``,
    ``num_included``, ``duration_s``, ``excluded_json`` (list of {node_id,
    partition_id, reason}), ``diagnostics_json`` (the strategy's own numbers
    of the round by name, e.g. TERM's ``running_estimate`` or AFL's
    ``mixture_weights``; schema version 3).
``device_train``
    Per round and device (the sampled ones, or all): ``sampled``, ``included`` (reply valid and
    aggregated), ``train_loss`` (F_k, the loss of the incoming model),
    ``train_loss_after``, ``tilted_weight`` (the aggregation weight applied),
    ``num_examples``.
``device_eval``
    Per round, device and split (val | test): ``loss``, ``accuracy``,
    ``correct``, ``examples``.
``round_stats``
    Per round and split: the fairness statistics and loss risks as
    ``stats_json`` (keys of :mod:`term_fl.maths.fairness`), plus real columns for
    the ones a table sorts on (mean, pooled_mean, worst_10, best_10, std)
    and for the loss risks a comparison draws per round (var, cvar, evar,
    tivar; schema version 4).

Conventions:

- A round is one transaction (:meth:`ResultsStore.record_round`): all of it
  is stored, or nothing. Recording a round twice is an error.
- NaN is stored as SQL NULL and read back as NaN; ±inf are kept. JSON
  columns hold standard JSON, where a non-finite number is ``null``;
  :meth:`ResultsStore.load_round_stats` reads such a ``null`` back as NaN
  (statistics are numbers), the other JSON columns keep it as None.
- A run killed hard (SIGKILL, power off, ``os._exit``) keeps ``running``
  in its ``status`` column; every round it completed is stored and
  readable. Its heartbeat stops, and readers show a ``running`` run whose
  heartbeat is older than :data:`LOST_AFTER_S` seconds as ``lost``
  (:attr:`RunInfo.status`; the ``status`` filter of :meth:`ResultsStore.list_runs`
  knows it too). No process ids are involved, so a reader in another
  container or on another machine (with a clock within a few seconds)
  judges the same. A lost run whose writer comes back is ``running`` again
  at its next heartbeat. The server calls ``finish_run(run_id,
  "interrupted")`` on KeyboardInterrupt and ``"failed"`` on an exception.
- Schema versions: 1 (0.1.x), 2 (adds ``runs.heartbeat_at``), 3
  (``rounds.diagnostics_json`` replaces the TERM-only column
  ``rounds.running_estimate``), 4 (adds ``round_stats.var``, ``cvar``,
  ``evar``, ``tivar``, filled from ``stats_json``). Opening a store of an
  older version for writing migrates it in place, in one transaction
  (:data:`~term_fl.results.schema.MIGRATIONS`); read-only opening reads
  versions 1 to 4 without changing the file.
- ``synchronous=NORMAL``: a committed round survives a crash of the
  process; a power loss may lose the last rounds, never corrupt the file.
"""

from __future__ import annotations

from .errors import DuplicateRoundError, RunNotFound, StoreError
from .reads import DAMAGED
from .rows import EvalRow, RunInfo, TrainRow
from .schema import (
    EVAL_COLUMNS,
    HEARTBEAT_S,
    LOST_AFTER_S,
    RISK_COLUMNS,
    RUN_STATUSES,
    SCHEMA_VERSION,
    STAT_COLUMNS,
    TRAIN_COLUMNS,
)
from .store import ResultsStore, new_run_id

__all__ = [
    "DAMAGED",
    "EVAL_COLUMNS",
    "HEARTBEAT_S",
    "LOST_AFTER_S",
    "RISK_COLUMNS",
    "RUN_STATUSES",
    "SCHEMA_VERSION",
    "STAT_COLUMNS",
    "TRAIN_COLUMNS",
    "DuplicateRoundError",
    "EvalRow",
    "ResultsStore",
    "RunInfo",
    "RunNotFound",
    "StoreError",
    "TrainRow",
    "new_run_id",
]
