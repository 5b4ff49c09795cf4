"""Small float models and the QDQ models onnxruntime's quantizer makes of them (per-channel int8
weights, uint8 activations, min-max calibration on seeded inputs): the int8 tests' fixtures."""

from __future__ import annotations

import io

import numpy as np
import onnx
import torch

from kernorch.frontend.quantize import quantize_int8


class ConvNet(torch.nn.Module):
    """conv-bn-relu, a residual block, a strided 1x1 conv, max pooling, global pooling, a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.c1, self.bn = torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16)
        self.c2 = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.c3 = torch.nn.Conv2d(16, 32, 1, stride=2)
        self.fc = torch.nn.Linear(32, 10)

    def forward(self, x):
        y = torch.relu(self.bn(self.c1(x)))
        y = torch.relu(self.c2(y) + y)
        y = torch.nn.functional.max_pool2d(self.c3(y), 2)
        return self.fc(y.mean((2, 3)))


class Block(torch.nn.Module):
    """A transformer encoder layer: attention (two activation x activation matmuls), GELU MLP,
    layer norms, residuals."""

    def __init__(self, d: int = 32, heads: int = 2) -> None:
        super().__init__()
        self.d, self.h = d, heads
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
        self.n1, self.n2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4).unbind(0)
        a = torch.softmax(q @ k.transpose(-1, -2) / (d // self.h) ** 0.5, -1) @ v
        x = self.n1(x + self.proj(a.transpose(1, 2).reshape(b, t, d)))
        return self.n2(x + self.down(torch.nn.functional.gelu(self.up(x))))


NETS = {"convnet": (ConvNet, (1, 3, 16, 16)), "block": (Block, (1, 8, 32))}


def float_model(name: str) -> onnx.ModelProto:
    cls, shape = NETS[name]
    torch.manual_seed(0)
    net = cls().eval()
    f = io.BytesIO()
    torch.onnx.export(net, (torch.randn(shape),), f, input_names=["x"], output_names=["y"], opset_version=17,
                      dynamo=False)
    return onnx.load_from_string(f.getvalue())


def feeds(name: str, seed: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal(NETS[name][1]).astype(np.float32)}


def qdq_model(name: str) -> onnx.ModelProto:
    return quantize_int8(float_model(name), [feeds(name, 100 + k) for k in range(8)])
