"""ResNet-50 and MobileNetV3-Large as torchvision defines them, written out here (torchvision is not
installed: PyPI torchvision would replace the CPU torch). Builders: ``bench.models``."""
from __future__ import annotations

from functools import partial

import torch.nn as nn


def _init_convnet(model: nn.Module, linear_std: float | None = None) -> None:
    """torchvision's init: convs kaiming fan_out; Linear N(0, linear_std) when given (biases are zero, then
    ``bench.models._finish`` randomizes them and the norms)."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear) and linear_std is not None:
            nn.init.normal_(m.weight, 0, linear_std)
            nn.init.zeros_(m.bias)


# ----------------------------------------------------------------------------------------------------------
# resnet50 (torchvision resnet.py: ResNet(Bottleneck, [3, 4, 6, 3]), "v1.5": stride on the 3x3 conv)
# ----------------------------------------------------------------------------------------------------------
class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet50(nn.Module):
    def __init__(self, layers=(3, 4, 6, 3), num_classes=1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, 2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, padding=1)
        self.layer1 = self._make_layer(64, layers[0])
        self.layer2 = self._make_layer(128, layers[1], 2)
        self.layer3 = self._make_layer(256, layers[2], 2)
        self.layer4 = self._make_layer(512, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512 * Bottleneck.expansion, num_classes)
        _init_convnet(self)

    def _make_layer(self, width: int, blocks: int, stride: int = 1) -> nn.Sequential:
        cout = width * Bottleneck.expansion
        down = None
        if stride != 1 or self.inplanes != cout:
            down = nn.Sequential(nn.Conv2d(self.inplanes, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        layers = [Bottleneck(self.inplanes, width, stride, down)]
        self.inplanes = cout
        layers += [Bottleneck(cout, width) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.avgpool(x).flatten(1))


# ----------------------------------------------------------------------------------------------------------
# mobilenetv3_large (torchvision mobilenetv3.py: mobilenet_v3_large, width_mult 1.0, no dilation)
# ----------------------------------------------------------------------------------------------------------
def _make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


_BN = partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)


class _ConvBNAct(nn.Sequential):
    """torchvision ``Conv2dNormActivation``: conv without bias, BatchNorm, optional activation."""

    def __init__(self, cin, cout, k=1, stride=1, groups=1, act: type[nn.Module] | None = None):
        layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False), _BN(cout)]
        if act is not None:
            layers.append(act(inplace=True))
        super().__init__(*layers)


class SqueezeExcitation(nn.Module):
    """torchvision ``ops.SqueezeExcitation`` with ``scale_activation=Hardsigmoid``."""

    def __init__(self, c: int, squeeze: int):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(c, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, c, 1)
        self.activation = nn.ReLU()
        self.scale_activation = nn.Hardsigmoid()

    def forward(self, x):
        scale = self.fc2(self.activation(self.fc1(self.avgpool(x))))
        return self.scale_activation(scale) * x


class InvertedResidual(nn.Module):
    def __init__(self, cin, k, exp, cout, se: bool, hs: bool, stride: int):
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        act = nn.Hardswish if hs else nn.ReLU
        layers: list[nn.Module] = []
        if exp != cin:
            layers.append(_ConvBNAct(cin, exp, 1, act=act))
        layers.append(_ConvBNAct(exp, exp, k, stride, groups=exp, act=act))
        if se:
            layers.append(SqueezeExcitation(exp, _make_divisible(exp // 4)))
        layers.append(_ConvBNAct(exp, cout, 1))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        out = self.block(x)
        return out + x if self.use_res_connect else out


# (input, kernel, expanded, output, squeeze-excitation, hardswish, stride)
_LARGE = [
    (16, 3, 16, 16, False, False, 1),
    (16, 3, 64, 24, False, False, 2),
    (24, 3, 72, 24, False, False, 1),
    (24, 5, 72, 40, True, False, 2),
    (40, 5, 120, 40, True, False, 1),
    (40, 5, 120, 40, True, False, 1),
    (40, 3, 240, 80, False, True, 2),
    (80, 3, 200, 80, False, True, 1),
    (80, 3, 184, 80, False, True, 1),
    (80, 3, 184, 80, False, True, 1),
    (80, 3, 480, 112, True, True, 1),
    (112, 3, 672, 112, True, True, 1),
    (112, 5, 672, 160, True, True, 2),
    (160, 5, 960, 160, True, True, 1),
    (160, 5, 960, 160, True, True, 1),
]


class MobileNetV3Large(nn.Module):
    def __init__(self, num_classes=1000, last_channel=1280, dropout=0.2):
        super().__init__()
        layers: list[nn.Module] = [_ConvBNAct(3, _LARGE[0][0], 3, 2, act=nn.Hardswish)]
        layers += [InvertedResidual(*cfg) for cfg in _LARGE]
        last_in = _LARGE[-1][3]
        layers.append(_ConvBNAct(last_in, 6 * last_in, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(6 * last_in, last_channel),
            nn.Hardswish(inplace=True),
            nn.Dropout(p=dropout, inplace=True),
            nn.Linear(last_channel, num_classes),
        )
        _init_convnet(self, linear_std=0.01)

    def forward(self, x):
        return self.classifier(self.avgpool(self.features(x)).flatten(1))
