"""The engines' ClientApp: the plain one over a workspace that keeps what it builds.

Each cache was measured (benchmarks/README.md: in-process round time) and
none changes a reply (``tests/test_client_app.py`` compares with the plain
ClientApp):

- per scenario (the last :data:`MAX_SCENARIOS` scenario JSON strings): the
  parsed scenario, its dataset (devices built lazily, then kept), the torch
  device, and two worker models, one to train in place and one to evaluate;
- per device (the last :data:`MAX_DEVICES` of them): its checked tensors,
  validation and test stacked (on the CPU the training tensors share the
  dataset's arrays);
- which global-model record the evaluation model holds: the in-process
  engine hands one record object to every client of a round, so it is
  loaded once per round for evaluation. Flower's engines deserialise a
  record per message, so nothing is reused there.

A cache is an object: the in-process engine makes one per run
(:func:`term_fl.engines.run_scenario`); Flower's Simulation Engine pickles
the ClientApp with every message, and a :class:`ClientCache` pickles as a
reference to its process's own (:data:`app`), so each Ray actor keeps one
for all the simulations of a ``ray_session``.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from flwr.app import ArrayRecord

from term_fl.clientapp.app import DeviceTensors, Setting, Workspace, make_client_app
from term_fl.flower_internals import from_array_record
from term_fl.learning.models import TermModel, model_for, set_weights
from term_fl.learning.training import move_model

__all__ = ["MAX_DEVICES", "MAX_SCENARIOS", "ClientCache", "app", "process_cache"]

MAX_SCENARIOS = 8  # a sweep's cells follow each other; a few suffice
MAX_DEVICES = 256  # a process of Flower's Simulation Engine may meet thousands of partitions

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LastUsed(Generic[K, V]):
    """A mapping that keeps the ``size`` entries used last."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K, make: Callable[[], V]) -> V:
        """The value of ``key``, made (and kept) when missing."""
        if key in self._items:
            self._items.move_to_end(key)
            return self._items[key]
        value = self._items[key] = make()
        if len(self._items) > self.size:
            self._items.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._items)


@dataclass
class _Models:
    """The worker models kept for one setting."""

    train: TermModel  # trained in place: always loaded, never taken for a global model
    evaluate: TermModel
    evaluate_holds: weakref.ref | None = None  # the record whose weights ``evaluate`` holds


class ClientCache(Workspace):
    """A :class:`~term_fl.clientapp.app.Workspace` that keeps scenarios, models and device tensors."""

    def __init__(self, max_scenarios: int = MAX_SCENARIOS, max_devices: int = MAX_DEVICES) -> None:
        self._settings: LastUsed[str, Setting] = LastUsed(max_scenarios)
        self._models: weakref.WeakKeyDictionary[Setting, _Models] = weakref.WeakKeyDictionary()
        self._tensors: LastUsed[tuple[Setting, int], DeviceTensors] = LastUsed(max_devices)

    def __reduce__(self) -> tuple[Callable[[], ClientCache], tuple[()]]:
        """Pickled (with the ClientApp, by Flower's engine) as a reference to the receiving process's cache."""
        return process_cache, ()

    def setting(self, scenario_json: str) -> Setting:
        return self._settings.get(scenario_json, lambda: super(ClientCache, self).setting(scenario_json))

    def _models_of(self, setting: Setting) -> _Models:
        models = self._models.get(setting)
        if models is None:
            pair = [model_for(setting.scenario, setting.dataset) for _ in range(2)]
            for model in pair:
                model.eval()
                move_model(model, setting.device)
            models = self._models[setting] = _Models(*pair)
        return models

    def model(self, setting: Setting, arrays: ArrayRecord, *, training: bool) -> TermModel:
        models = self._models_of(setting)
        if training:
            set_weights(models.train, from_array_record(arrays))
            return models.train
        if models.evaluate_holds is None or models.evaluate_holds() is not arrays:
            set_weights(models.evaluate, from_array_record(arrays))
            models.evaluate_holds = weakref.ref(arrays)
        return models.evaluate

    def tensors(self, setting: Setting, model: TermModel, partition_id: int) -> DeviceTensors:
        return self._tensors.get((setting, partition_id),
                                 lambda: super(ClientCache, self).tensors(setting, model, partition_id))


_process_cache: ClientCache | None = None


def process_cache() -> ClientCache:
    """This process's ClientCache (made on first use): the one Flower's engine pickles references to."""
    global _process_cache
    if _process_cache is None:
        _process_cache = ClientCache()
    return _process_cache


app = make_client_app(process_cache())
"""The ClientApp of Flower's engines (and of ``flwr run .``): the plain one over this process's cache."""
