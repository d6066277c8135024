"""pytorchapp: A Flower / PyTorch app."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader


class Net(nn.Module):
    """Model (simple CNN adapted from 'PyTorch: A 60 Minute Blitz')"""

    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = x.view(-1, 16 * 5 * 5)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def local_cifar10(partition_id: int, size: int = 100):  # term-fl test: CIFAR-10's shape, made here (no download)
    g = torch.Generator().manual_seed(partition_id)  # term-fl test
    label = torch.randint(0, 10, (size,), generator=g)  # term-fl test
    label[: size // 2] = label[: size // 2] % (partition_id + 2)  # term-fl test: each partition its own mix
    pattern = torch.rand((10, 3, 32, 32), generator=torch.Generator().manual_seed(2024))  # term-fl test
    img = (0.5 * pattern[label] + 0.5 * torch.rand((size, 3, 32, 32), generator=g) - 0.5) / 0.5  # term-fl test
    return [{"img": img[i], "label": int(label[i])} for i in range(size)]  # term-fl test: Flower Datasets' rows


def load_data(partition_id: int, num_partitions: int):
    """Load partition CIFAR10 data."""
    partition = local_cifar10(partition_id)  # term-fl test: in place of Flower Datasets' CIFAR-10 partition
    # Divide data on each node: 80% train, 20% test
    split = int(0.8 * len(partition))  # term-fl test: in place of Dataset.train_test_split
    # Construct dataloaders
    trainloader = DataLoader(partition[:split], batch_size=32, shuffle=True)  # term-fl test
    testloader = DataLoader(partition[split:], batch_size=32)  # term-fl test
    return trainloader, testloader


def train(net, trainloader, epochs, lr, device):
    """Train the model on the training set."""
    net.to(device)  # move model to GPU if available
    criterion = torch.nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.Adam(net.parameters(), lr=lr)
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
    avg_trainloss = running_loss / len(trainloader)
    return avg_trainloss


def test(net, testloader, device):
    """Validate the model on the test set."""
    net.to(device)
    net.eval()
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
