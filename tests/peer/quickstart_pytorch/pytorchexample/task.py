"""pytorchexample: model, data and train / test loops.

The shape of Flower's quickstart-pytorch ``task.py``: its CNN (from PyTorch's
"60 Minute Blitz"), SGD with momentum 0.9, cross-entropy, dict batches
``{"img": ..., "label": ...}`` as Flower Datasets gives them. Two changes for
term-fl's peer tests: a BatchNorm layer (its ``num_batches_tracked`` buffer is
a 0-d int64 array) and random tensors instead of CIFAR-10 (loading CIFAR-10
needs torchvision and a download).
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

TRAIN_SIZE, TEST_SIZE, CENTRAL_SIZE = 64, 16, 64


class Net(nn.Module):
    """Two conv layers (the first followed by BatchNorm), three linear layers, 10 classes."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.bn1 = nn.BatchNorm2d(6)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class RandomImages(Dataset):
    """``size`` 3x32x32 images with labels 0..9, drawn from ``seed``; items are dicts."""

    def __init__(self, size: int, seed: int):
        generator = torch.Generator().manual_seed(seed)
        self.images = torch.randn(size, 3, 32, 32, generator=generator)
        self.labels = torch.randint(0, 10, (size,), generator=generator)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        return {"img": self.images[index], "label": self.labels[index]}


def load_data(partition_id: int, num_partitions: int, batch_size: int):
    """Train and test loaders of one partition (random data, seeded by the partition)."""
    seed = 1000 * num_partitions + partition_id
    train = RandomImages(TRAIN_SIZE, seed)
    test = RandomImages(TEST_SIZE, seed + 500)
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(train, batch_size=batch_size, shuffle=True, generator=generator), DataLoader(
        test, batch_size=batch_size
    )


def load_centralized_dataset():
    """A held-out loader for the server's evaluation."""
    return DataLoader(RandomImages(CENTRAL_SIZE, seed=7), batch_size=128)


def train(net, trainloader, epochs, lr, device):
    """SGD (momentum 0.9) on cross-entropy; returns the mean loss *during* training."""
    net.to(device)
    criterion = nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    net.train()
    total, batches = 0.0, 0
    for _ in range(epochs):
        for batch in trainloader:
            optimizer.zero_grad()
            loss = criterion(net(batch["img"].to(device)), batch["label"].to(device))
            loss.backward()
            optimizer.step()
            total += loss.item()
            batches += 1
    return total / batches


def test(net, testloader, device):
    """Mean batch loss and accuracy."""
    net.to(device)
    net.eval()
    criterion = nn.CrossEntropyLoss()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for batch in testloader:
            images, labels = batch["img"].to(device), batch["label"].to(device)
            outputs = net(images)
            loss += criterion(outputs, labels).item()
            correct += (outputs.argmax(1) == labels).sum().item()
    return loss / len(testloader), correct / len(testloader.dataset)
