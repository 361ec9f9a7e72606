"""Models and training loops shared by the adapter tests (test_adapter.py, test_adapter_gpu.py,
test_adapter_dense.py, test_runtime_executor.py) and the dense-prediction export test."""
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


def momentum(m):
    """The tests' optimizer: SGD with momentum, whose state the plans move too."""
    return torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)


def twins(model, make_optimizer):
    """Two identical copies of `model`, each with its own optimizer."""
    a, b = copy.deepcopy(model), copy.deepcopy(model)
    return a, make_optimizer(a), b, make_optimizer(b)


class UNet(nn.Module):
    """A small 2-D U-Net for per-pixel classification: two levels, convolution, batch norm,
    in-place ReLU (called four times), max pooling, a transposed-convolution up step
    (`up="transpose"`) or nearest upsampling (`up="nearest"`: torch 1.13's CPU autocast runs
    ConvTranspose in float32, CUDA's in the low dtype), and skip connections by concatenation.
    `aux=True` returns torchvision segmentation's dict {"out", "aux"} (a second head on the
    bottleneck, upsampled)."""

    def __init__(self, width=4, classes=3, up="transpose", aux=False):
        super().__init__()
        c = width
        self.conv1 = nn.Conv2d(3, c, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(c, 2 * c, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(2 * c)
        if up == "transpose":
            self.up = nn.ConvTranspose2d(2 * c, c, 2, stride=2)
        else:
            self.up = nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"),
                                    nn.Conv2d(2 * c, c, 1))
        self.conv3 = nn.Conv2d(2 * c, c, 3, padding=1)
        self.bn3 = nn.BatchNorm2d(c)
        self.head = nn.Conv2d(c, classes, 1)
        self.aux = nn.Conv2d(2 * c, classes, 1) if aux else None

    def forward(self, x):
        e = self.relu(self.bn1(self.conv1(x)))
        m = self.relu(self.bn2(self.conv2(self.pool(e))))
        d = self.relu(self.bn3(self.conv3(torch.cat([self.up(m), e], 1))))
        out = self.head(d)
        if self.aux is None:
            return out
        return {"out": out, "aux": F.interpolate(self.aux(m), scale_factor=2)}


class GroupNormNet(nn.Module):
    """Convolutions with GroupNorm (exported as the InstanceNormalization pattern), a shared
    ReLU module called twice and a per-pixel head."""

    def __init__(self, width=8, classes=3):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, padding=1)
        self.gn1 = nn.GroupNorm(2, width)
        self.act = nn.ReLU()
        self.conv2 = nn.Conv2d(width, width, 3, padding=1)
        self.gn2 = nn.GroupNorm(4, width)
        self.head = nn.Conv2d(width, classes, 1)

    def forward(self, x):
        x = self.act(self.gn1(self.conv1(x)))
        x = self.act(self.gn2(self.conv2(x)))
        return self.head(x)


def pixel_batch(n, res, classes, seed=1):
    """Images [n, 3, res, res] and per-pixel integer labels [n, res, res]."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, 3, res, res, generator=g),
            torch.randint(0, classes, (n, res, res), generator=g))


def pixel_cross_entropy(out, y):
    """Per-pixel cross-entropy; for a dict {"out", "aux"}, out's plus half of aux's."""
    if isinstance(out, dict):
        aux = 0.5 * F.cross_entropy(out["aux"], y) if "aux" in out else 0
        return F.cross_entropy(out["out"], y) + aux
    return F.cross_entropy(out, y)


def dice_loss(out, y, eps=1.0):
    """A soft Dice loss over the classes of per-pixel logits, computed by the script (the
    plan's loss is 'external')."""
    p = torch.softmax(out.float(), 1)
    onehot = F.one_hot(y, out.shape[1]).permute(0, 3, 1, 2).to(p.dtype)
    inter = (p * onehot).sum((0, 2, 3))
    total = p.sum((0, 2, 3)) + onehot.sum((0, 2, 3))
    return 1 - ((2 * inter + eps) / (total + eps)).mean()


def train_with(model, optimizer, x, target, loss_fn, steps=3, seed=7, autocast=None):
    """Plain training steps with any loss, the forward and the loss inside
    torch.autocast(x's device, dtype=autocast) when given (backward outside it, as
    PyTorch's examples do); returns the losses."""
    torch.manual_seed(seed)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        if autocast is None:
            loss = loss_fn(model(x), target)
        else:
            with torch.autocast(x.device.type, dtype=autocast):
                loss = loss_fn(model(x), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().clone())
    return losses


class UNet3d(nn.Module):
    """One level down and up in 3-D: Conv3d, BatchNorm3d, in-place ReLU, MaxPool3d,
    ConvTranspose3d, a concatenated skip connection, a per-voxel head."""

    def __init__(self, width=4, classes=2):
        super().__init__()
        c = width
        self.conv1 = nn.Conv3d(1, c, 3, padding=1)
        self.bn1 = nn.BatchNorm3d(c)
        self.relu = nn.ReLU(inplace=True)
        self.pool = nn.MaxPool3d(2)
        self.conv2 = nn.Conv3d(c, 2 * c, 3, padding=1)
        self.bn2 = nn.BatchNorm3d(2 * c)
        self.up = nn.ConvTranspose3d(2 * c, c, 2, stride=2)
        self.conv3 = nn.Conv3d(2 * c, c, 3, padding=1)
        self.head = nn.Conv3d(c, classes, 1)

    def forward(self, x):
        e = self.relu(self.bn1(self.conv1(x)))
        m = self.relu(self.bn2(self.conv2(self.pool(e))))
        return self.head(self.relu(self.conv3(torch.cat([self.up(m), e], 1))))


def conv_block(conv, norm, act, cin, cout, **kw):
    """conv (3x3, no bias), norm, act: a U-Net level's layer."""
    return nn.Sequential(conv(cin, cout, 3, padding=kw.pop("padding", 1), bias=False, **kw),
                         norm(cout), act())


class DenseOps(nn.Module):
    """A 2-D U-Net with the other ops of dense prediction: GroupNorm, InstanceNorm with affine
    parameters, a dilated and a grouped convolution, LeakyReLU, ELU, Tanh, a transposed
    convolution, bilinear upsampling (functional) and dropout."""

    def __init__(self, c=8, classes=3):
        super().__init__()
        self.enc1 = conv_block(nn.Conv2d, nn.BatchNorm2d, nn.ReLU, 3, c)
        self.enc2 = conv_block(nn.Conv2d, lambda n: nn.GroupNorm(4, n), nn.LeakyReLU, c, 2 * c)
        self.mid = conv_block(nn.Conv2d, lambda n: nn.InstanceNorm2d(n, affine=True), nn.ELU,
                          2 * c, 4 * c, padding=2, dilation=2)
        self.up2 = nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2)
        self.dec2 = conv_block(nn.Conv2d, nn.BatchNorm2d, nn.ReLU, 4 * c, 2 * c, groups=2)
        self.dec1 = conv_block(nn.Conv2d, nn.BatchNorm2d, nn.Tanh, 3 * c, c)
        self.drop = nn.Dropout(0.1)
        self.head = nn.Conv2d(c, classes, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        m = self.mid(F.max_pool2d(e2, 2))
        d2 = self.dec2(torch.cat([self.up2(m), e2], 1))
        d1 = self.dec1(torch.cat([F.interpolate(d2, scale_factor=2, mode="bilinear",
                                                align_corners=False), e1], 1))
        return self.head(self.drop(d1))
