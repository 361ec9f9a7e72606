"""Models and training loops shared by the adapter tests (test_adapter.py, test_adapter_gpu.py)."""
import copy
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402


class Tiny(nn.Module):
    """A small CNN with what breaks naive adapters: an in-place ReLU called twice (once on a
    residual sum), batch norm, max pooling, dropout, a functional flatten."""

    def __init__(self, width=8, classes=5):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, 2 * width, 3, stride=2, padding=1)
        self.act = nn.ReLU()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.drop = nn.Dropout(0.2)
        self.fc = nn.Linear(2 * width, classes)

    def forward(self, x):
        x = self.pool(self.relu(self.bn1(self.conv1(x))))
        y = self.bn2(self.conv2(x))
        x = self.relu(x + y)
        x = self.avgpool(self.act(self.conv3(x)))
        return self.fc(self.drop(torch.flatten(x, 1)))


class TinyOutOfOrder(Tiny):
    """The same modules and shapes, called in another order (pool before conv1)."""

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(self.pool(x))))
        y = self.bn2(self.conv2(x))
        x = self.relu(x + y)
        x = self.avgpool(self.act(self.conv3(x)))
        return self.fc(self.drop(torch.flatten(x, 1)))


def batch(n, res, classes, device="cpu", seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, res, res, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    return x.to(device), y.to(device)


def train(model, optimizer, x, y, steps=3, seed=7):
    """Plain training steps; returns the losses (as tensors, compared bit for bit)."""
    torch.manual_seed(seed)  # dropout draws the same masks in every run
    losses = []
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().clone())
    return losses


def same(a, b):
    """Bit-identical: equal as tensors and equal in their bytes (NaN-safe)."""
    def raw(t):
        return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(raw(a), raw(b))


def compare(model_a, losses_a, model_b, losses_b):
    """'' when losses and every parameter and buffer are bit-identical, else what differs."""
    for i, (la, lb) in enumerate(zip(losses_a, losses_b)):
        if not same(la, lb):
            return f"loss of step {i}: {la.item()!r} vs {lb.item()!r}"
    sa, sb = model_a.state_dict(), model_b.state_dict()
    for k in sa:
        if not same(sa[k], sb[k]):
            return f"{k} differs"
    return ""


def twins(model, make_optimizer):
    """Two identical copies of `model`, each with its own optimizer."""
    a, b = copy.deepcopy(model), copy.deepcopy(model)
    return a, make_optimizer(a), b, make_optimizer(b)
