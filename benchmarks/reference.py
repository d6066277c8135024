"""A naive FedAvg loop in plain numpy/torch: the yardstick of the in-process engine.

No Flower, no messages, no strategies, no records: per round sample
``clients_per_round`` devices (the same ones the engine's strategies sample
for the run seed and round), train each with a minimal torch SGD loop (same
lr, epochs, batch size and loss as the scenario's model: hinge + L2 for the
linear SVM, cross-entropy for logistic regression), average the weights by
n_k, and evaluate the global model (loss and accuracy) on every device's
validation and test split. The device tensors are built once, before timing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from term_fl.data import dataset_for
from term_fl.config import Scenario
from term_fl.common.seeding import TRAIN_SAMPLING


@dataclass
class _Device:
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


class ReferenceFedAvg:
    """Plain FedAvg over the scenario's dataset (linear SVM or softmax regression)."""

    def __init__(self, scenario: Scenario, device: str = "cpu") -> None:
        if scenario.model.name not in ("linear_svm", "logreg"):
            raise ValueError(f"the reference loop knows linear_svm and logreg, not {scenario.model.name}")
        self.scenario = scenario
        self.torch_device = torch.device(device)
        dataset = dataset_for(scenario)
        self.svm = scenario.model.name == "linear_svm"
        self.l2 = scenario.model.linear_svm.l2 if self.svm else 0.0
        self.num_classes = 1 if self.svm else dataset.num_classes
        self.num_features = dataset.num_features
        self.devices = []
        for k in range(dataset.num_devices):
            d = dataset.device(k)
            t = [torch.as_tensor(a).to(self.torch_device) for a in (d.x_train, d.y_train, d.x_val, d.y_val, d.x_test, d.y_test)]
            self.devices.append(_Device(*[a.float() if i % 2 == 0 else a.long() for i, a in enumerate(t)]))
        self.w = torch.zeros(self.num_features, self.num_classes, device=self.torch_device)
        self.b = torch.zeros(self.num_classes, device=self.torch_device)

    # -- model -----------------------------------------------------------------
    def _loss(self, w: torch.Tensor, b: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per-sample loss."""
        scores = x @ w + b
        if self.svm:
            return torch.clamp(1.0 - (2.0 * y.float() - 1.0) * scores[:, 0], min=0.0)
        return torch.nn.functional.cross_entropy(scores, y, reduction="none")

    def _correct(self, w: torch.Tensor, b: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> int:
        scores = x @ w + b
        pred = (scores[:, 0] > 0).long() if self.svm else scores.argmax(1)
        return int((pred == y).sum())

    # -- one device --------------------------------------------------------------
    def train_device(self, k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        c = self.scenario.client
        dev = self.devices[k]
        w = self.w.clone().requires_grad_(True)
        b = self.b.clone().requires_grad_(True)
        opt = torch.optim.SGD([w, b], lr=c.lr)
        gen = torch.Generator().manual_seed(seed)
        n = dev.x_train.shape[0]
        for _ in range(c.epochs):
            order = torch.randperm(n, generator=gen).to(self.torch_device)
            for idx in order.split(c.batch_size):
                loss = self._loss(w, b, dev.x_train[idx], dev.y_train[idx]).mean()
                if self.l2:
                    loss = loss + 0.5 * self.l2 * (w * w).sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
        return w.detach(), b.detach(), n

    # -- rounds ------------------------------------------------------------------
    def run_round(self, server_round: int) -> dict[str, float]:
        """One round; returns its duration and the mean test accuracy."""
        start = time.perf_counter()
        m = min(self.scenario.run.clients_per_round, len(self.devices))
        # The devices the engine's strategies sample in this round (same seed, same stream):
        # device sizes differ 60-fold, so a different draw would time different work.
        rng = np.random.default_rng([self.scenario.run.seed, server_round, TRAIN_SAMPLING])
        sampled = sorted(rng.choice(len(self.devices), size=m, replace=False).tolist())
        results = [self.train_device(k, seed=1000 * server_round + k) for k in sampled]
        total = sum(n for _, _, n in results)
        self.w = sum(w * (n / total) for w, _, n in results)
        self.b = sum(b * (n / total) for _, b, n in results)
        accuracies = []
        with torch.no_grad():
            for dev in self.devices:
                for x, y in ((dev.x_val, dev.y_val), (dev.x_test, dev.y_test)):
                    float(self._loss(self.w, self.b, x, y).mean())
                    accuracies.append(self._correct(self.w, self.b, x, y) / x.shape[0])
        return {"duration_s": time.perf_counter() - start, "mean_accuracy": float(np.mean(accuracies[1::2]))}
