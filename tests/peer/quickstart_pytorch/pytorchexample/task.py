"""pytorchexample: A Flower / PyTorch app."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset  # term-fl peer test: random tensors, no torchvision


class Net(nn.Module):
    """Model (simple CNN adapted from 'PyTorch: A 60 Minute Blitz')"""

    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.bn1 = nn.BatchNorm2d(6)  # term-fl peer test: a 0-d int64 buffer (num_batches_tracked)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.bn1(self.conv1(x))))  # term-fl peer test: bn1
        x = self.pool(F.relu(self.conv2(x)))
        x = x.view(-1, 16 * 5 * 5)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


# term-fl peer test: random tensors in place of CIFAR-10 (Flower Datasets, torchvision and a download)
TRAIN_SIZE, TEST_SIZE, CENTRAL_SIZE = 64, 16, 64


class RandomImages(Dataset):
    """``size`` 3x32x32 images with labels 0..9, drawn from ``seed``; items are dicts like Flower Datasets'."""

    def __init__(self, size: int, seed: int):
        generator = torch.Generator().manual_seed(seed)
        self.images = torch.randn(size, 3, 32, 32, generator=generator)
        self.labels = torch.randint(0, 10, (size,), generator=generator)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        return {"img": self.images[index], "label": self.labels[index]}


def load_data(partition_id: int, num_partitions: int, batch_size: int):
    """Load partition data (random, seeded by the partition)."""
    seed = 1000 * num_partitions + partition_id
    trainloader = DataLoader(
        RandomImages(TRAIN_SIZE, seed), batch_size=batch_size, shuffle=True,
        generator=torch.Generator().manual_seed(seed),
    )
    testloader = DataLoader(RandomImages(TEST_SIZE, seed + 500), batch_size=batch_size)
    return trainloader, testloader


def load_centralized_dataset():
    """Load test set and return dataloader."""
    return DataLoader(RandomImages(CENTRAL_SIZE, seed=7), batch_size=128)


def train(net, trainloader, epochs, lr, device):
    """Train the model on the training set."""
    net.to(device)  # move model to GPU if available
    criterion = torch.nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    net.train()
    running_loss = 0.0
    for _ in range(epochs):
        for batch in trainloader:
            images = batch["img"].to(device)
            labels = batch["label"].to(device)
            optimizer.zero_grad()
            loss = criterion(net(images), labels)
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
    avg_trainloss = running_loss / (epochs * len(trainloader))
    return avg_trainloss


def test(net, testloader, device):
    """Validate the model on the test set."""
    net.to(device)
    criterion = torch.nn.CrossEntropyLoss()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for batch in testloader:
            images = batch["img"].to(device)
            labels = batch["label"].to(device)
            outputs = net(images)
            loss += criterion(outputs, labels).item()
            correct += (torch.max(outputs.data, 1)[1] == labels).sum().item()
    accuracy = correct / len(testloader.dataset)
    loss = loss / len(testloader)
    return loss, accuracy
