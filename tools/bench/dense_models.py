"""U-Nets for the dense-prediction benchmark (dense_training.py), 2-D and 3-D.

The classic U-Net (Ronneberger et al. 2015, Cicek et al. 2016 for 3-D), with the padding and
batch norm of current practice: each block is two 3x3 (3x3x3) convolutions without bias, each
followed by batch norm and an in-place ReLU; `depth` max-pooling steps down, each doubling the
width; each step up is a 2x2 (2x2x2) transposed convolution halving the width, concatenated
with the encoder's output of that level, then a block; a 1x1 convolution gives per-pixel
(per-voxel) class logits at the input's resolution. Input sides must be divisible by
2**depth.

Its blocks are stem, down1..downD (encoder), upD..up1 (decoder) and head.
`UNet.run(x, call)` is the forward with every encoder and decoder block called through
`call(block, *inputs)`: `forward` calls them directly, the checkpointing configuration through
torch.utils.checkpoint.checkpoint, so both run the same modules in the same order.
"""
import torch
from torch import nn

LAYERS = {2: (nn.Conv2d, nn.BatchNorm2d, nn.MaxPool2d, nn.ConvTranspose2d),
          3: (nn.Conv3d, nn.BatchNorm3d, nn.MaxPool3d, nn.ConvTranspose3d)}


def _layers(dims):
    if dims not in LAYERS:
        raise ValueError(f"dims: 2 or 3, not {dims!r}")
    return LAYERS[dims]


class Block(nn.Sequential):
    """Two convolutions 3x3 (3x3x3), each with batch norm and ReLU."""

    def __init__(self, cin, cout, dims):
        conv, norm, _, _ = _layers(dims)
        super().__init__(conv(cin, cout, 3, padding=1, bias=False), norm(cout),
                         nn.ReLU(inplace=True),
                         conv(cout, cout, 3, padding=1, bias=False), norm(cout),
                         nn.ReLU(inplace=True))


class Down(nn.Module):
    """One level down: max pooling 2, then a block."""

    def __init__(self, cin, cout, dims):
        super().__init__()
        _, _, pool, _ = _layers(dims)
        self.pool = pool(2)
        self.block = Block(cin, cout, dims)

    def forward(self, x):
        return self.block(self.pool(x))


class Up(nn.Module):
    """One level up: transposed convolution 2 stride 2 (halving the width), concatenation with
    the skip connection, then a block."""

    def __init__(self, cin, cout, dims):
        super().__init__()
        _, _, _, transpose = _layers(dims)
        self.up = transpose(cin, cout, 2, stride=2)
        self.block = Block(2 * cout, cout, dims)

    def forward(self, x, skip):
        return self.block(torch.cat([self.up(x), skip], 1))


def _direct(block, *inputs):
    return block(*inputs)


class UNet(nn.Module):
    """U-Net of `depth` levels and base width `base` over `dims`-D inputs [N, in_channels,
    *sides]; returns logits [N, classes, *sides]."""

    def __init__(self, in_channels, classes, base=64, depth=4, dims=2):
        super().__init__()
        widths = [base * 2 ** k for k in range(depth + 1)]
        conv = _layers(dims)[0]
        self.depth = depth
        self.stem = Block(in_channels, base, dims)
        # Named attributes, not a ModuleList: the exporter's scopes then name every module by
        # its path (/down1/pool), which is how attach() finds them.
        for k in range(depth):
            setattr(self, f"down{k + 1}", Down(widths[k], widths[k + 1], dims))
        for k in reversed(range(depth)):
            setattr(self, f"up{k + 1}", Up(widths[k + 1], widths[k], dims))
        self.head = conv(base, classes, 1)

    def run(self, x, call):
        skips = [call(self.stem, x)]
        for k in range(1, self.depth + 1):
            skips.append(call(getattr(self, f"down{k}"), skips[-1]))
        x = skips.pop()
        for k in reversed(range(1, self.depth + 1)):
            x = call(getattr(self, f"up{k}"), x, skips.pop())
        return self.head(x)

    def forward(self, x):
        return self.run(x, _direct)
