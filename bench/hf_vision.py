"""Vision models from transformers configs with random weights (no hub downloads), for the extra bench
models: PoolFormer-S12 (average-pool token mixers) and EfficientNet-B0 (depthwise convolutions with
SiLU and squeeze-and-excitation). Each returns the last hidden state (N, C, H/32, W/32) as one
tensor, so the export has one static output."""

from __future__ import annotations

import torch
from torch import nn


class LastHiddenState(nn.Module):
    """``model(pixel_values).last_hidden_state`` as a plain tensor."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values).last_hidden_state


def poolformer_s12(size: int, seed: int = 0) -> nn.Module:
    from transformers import PoolFormerConfig, PoolFormerModel

    torch.manual_seed(seed)
    cfg = PoolFormerConfig(image_size=size, depths=[2, 2, 6, 2], hidden_sizes=[64, 128, 320, 512])
    return LastHiddenState(PoolFormerModel(cfg)).eval()


def efficientnet_b0(size: int, seed: int = 0) -> nn.Module:
    from transformers import EfficientNetConfig, EfficientNetModel

    torch.manual_seed(seed)
    cfg = EfficientNetConfig(image_size=size, width_coefficient=1.0, depth_coefficient=1.0, hidden_dim=1280)
    return LastHiddenState(EfficientNetModel(cfg)).eval()
