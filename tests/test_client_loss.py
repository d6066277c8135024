"""term_fl.plugin.losses.pre_training_loss: the loss of the received model, measured without training it."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from term_fl.plugin.losses import TRAIN_LOSS_BEFORE, pre_training_loss


def data(n: int = 10, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 4, generator=g), torch.randint(0, 3, (n,), generator=g)


def batches(x, y, sizes):
    out, start = [], 0
    for size in sizes:
        out.append((x[start:start + size], y[start:start + size]))
        start += size
    return out


def bn_model() -> nn.Module:
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 3))


def per_sample_mean(model: nn.Module, x, y) -> float:
    """The reference: every sample's loss in eval mode, averaged by hand."""
    reference = copy.deepcopy(model).eval()
    with torch.no_grad():
        logits = reference(x)
    losses = [float(nn.functional.cross_entropy(logits[i:i + 1], y[i:i + 1])) for i in range(len(y))]
    return sum(losses) / len(losses)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mean_over_samples_whatever_the_batch_sizes_and_the_reduction(reduction):
    model = bn_model()
    x, y = data(10)
    value = pre_training_loss(model, batches(x, y, [4, 4, 2]), nn.CrossEntropyLoss(reduction=reduction))
    assert value == pytest.approx(per_sample_mean(model, x, y), rel=1e-6)


def test_a_plain_function_as_loss_is_taken_as_a_batch_mean():
    model = bn_model()
    x, y = data(7)
    value = pre_training_loss(model, batches(x, y, [3, 3, 1]), nn.functional.cross_entropy)
    assert value == pytest.approx(per_sample_mean(model, x, y), rel=1e-6)


def test_model_is_left_as_it_was_batchnorm_statistics_included():
    model = bn_model().train()
    before = copy.deepcopy(model.state_dict())
    x, y = data(12)
    pre_training_loss(model, DataLoader(TensorDataset(x, y), batch_size=5), nn.CrossEntropyLoss())
    after = model.state_dict()
    assert model.training, "the training mode is restored"
    assert set(before) == set(after)
    for key in before:
        assert torch.equal(before[key], after[key]), key  # running stats and num_batches_tracked untouched
    assert all(p.grad is None for p in model.parameters())


def test_eval_mode_is_restored_too():
    model = bn_model().eval()
    x, y = data(6)
    pre_training_loss(model, [(x, y)], nn.CrossEntropyLoss())
    assert not model.training


def test_mapping_batches_need_their_keys():
    model = bn_model()
    x, y = data(8)
    loader = [{"img": x[:5], "label": y[:5]}, {"img": x[5:], "label": y[5:]}]
    value = pre_training_loss(model, loader, nn.CrossEntropyLoss(), keys=("img", "label"))
    assert value == pytest.approx(per_sample_mean(model, x, y), rel=1e-6)
    with pytest.raises(ValueError, match=r"keys=\(INPUT_KEY, TARGET_KEY\).*\['img', 'label'\]|\['img', 'label'\].*keys="):
        pre_training_loss(model, loader, nn.CrossEntropyLoss())


def test_no_sample_and_odd_batches_are_clear_errors():
    model = bn_model()
    with pytest.raises(ValueError, match="no sample"):
        pre_training_loss(model, [], nn.CrossEntropyLoss())
    with pytest.raises(ValueError, match=r"\(inputs, targets\)"):
        pre_training_loss(model, [torch.zeros(2, 4)], nn.CrossEntropyLoss())


def test_the_key_is_not_flowers_train_loss():
    """Flower's examples send "train_loss" as the mean loss *during* local training."""
    assert TRAIN_LOSS_BEFORE == "train_loss_before"
