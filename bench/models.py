"""Benchmark models for kernorch, built with random weights and fixed seeds.

Every builder has the signature ``builder(size=None, depth=None, seed=0)`` and returns
``(module_in_eval_mode, example_inputs_tuple)``:

* ``size``: ``None`` -> the benchmark size (``DEFAULT_SIZES``), ``"small"`` -> a fast test size
  (``SMALL_SIZES``), or an ``int`` (image side for vision models, sequence length for ``gpt2_block``).
* ``depth``: number of repeated blocks, only for models that have that knob (``DEPTH_KNOB``);
  ``None`` keeps the reference depth.
* ``seed``: seeds the weights (``torch.manual_seed``) and the example inputs.

No weights are downloaded. Norm layers get random affine parameters and BatchNorm running stats are
calibrated on the example input (one train-mode pass of the BN layers only), so activations stay
O(1) through deep nets and per-channel layout bugs are not hidden by identity norms.

Architectures (own definitions, timm is deliberately not used):

* ``candy``: fast-neural-style TransformerNet (pytorch/examples ``transformer_net.py``).
* ``segformer_b0``: ``transformers.SegformerForSemanticSegmentation(SegformerConfig(num_labels=150))``
  wrapped to return the logits tensor only (``bench/README.md`` says how to install transformers).
* ``efficientvit_b0``: timm ``efficientvit_b0`` (``efficientvit_mit.py``).
* ``vit_tiny``: timm ``vit_tiny_patch16_224`` (attention written out as matmul/softmax, i.e. timm's
  non-fused path, which is numerically the same).
* ``gpt2_block``: 2 GPT-2 decoder blocks (768 wide, 12 heads) + final LayerNorm on hidden states.
* ``cspdarknet53_mish``: timm ``cspdarknet53`` with ``act_layer=mish``.
* ``resnet50``: torchvision ``resnet50`` (Bottleneck blocks 3,4,6,3, stride on the 3x3 conv).
* ``mobilenetv3_large``: torchvision ``mobilenet_v3_large`` (inverted residuals, depthwise convs,
  squeeze-excitation with hardsigmoid, hardswish).
* ``gpt2``, ``bert_base``: ``transformers`` configs with random weights (``bench/language_models.py``).
* ``poolformer_s12``, ``efficientnet_b0``: ``transformers`` PoolFormer-S12 and EfficientNet-B0 configs with
  random weights, returning the last hidden state (``bench/hf_vision.py``).
"""
from __future__ import annotations

import math
from typing import Callable, Optional, Union

import torch
import torch.nn as nn
import torch.nn.functional as F

# Bump when an architecture or the weight/input generation changes: it is part of the cache file names.
VERSION = 1

Size = Optional[Union[int, str]]

DEFAULT_SIZES = {
    "candy": 224,
    "segformer_b0": 512,
    "efficientvit_b0": 224,
    "vit_tiny": 224,
    "gpt2_block": 128,
    "cspdarknet53_mish": 416,
    "resnet50": 224,
    "mobilenetv3_large": 224,
    "gpt2": 128,       # tokens
    "bert_base": 128,  # tokens
    "poolformer_s12": 224,
    "efficientnet_b0": 224,
}
SMALL_SIZES = {
    "candy": 64,
    "segformer_b0": 128,
    "efficientvit_b0": 64,
    "vit_tiny": 64,
    "gpt2_block": 32,
    "cspdarknet53_mish": 128,
    "resnet50": 128,  # at 64 the BN stats of layer4 come from 2x2 maps: float32 drifts 3e-3 from float64
    "mobilenetv3_large": 64,
    "gpt2": 16,
    "bert_base": 16,
    "poolformer_s12": 64,
    "efficientnet_b0": 128,  # at 64 the BN stats of the last stage come from 2x2 maps (2e-3 from ORT)
}
# model -> (what depth counts, reference value)
DEPTH_KNOB = {
    "candy": ("residual blocks", 5),
    "vit_tiny": ("transformer blocks", 12),
    "gpt2_block": ("decoder blocks", 2),
    "gpt2": ("decoder blocks", 12),
    "bert_base": ("encoder layers", 12),
}


def resolve_size(name: str, size: Size) -> int:
    if size is None:
        return DEFAULT_SIZES[name]
    if size == "small":
        return SMALL_SIZES[name]
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size
    raise ValueError(f"{name}: size must be None, 'small' or a positive int, got {size!r}")


def _resolve_depth(name: str, depth: Optional[int]) -> int:
    if name not in DEPTH_KNOB:
        if depth is not None:
            raise ValueError(f"{name} has no depth knob")
        return 0
    if depth is None:
        return DEPTH_KNOB[name][1]
    if not isinstance(depth, int) or depth < 1:
        raise ValueError(f"{name}: depth must be a positive int, got {depth!r}")
    return depth


# ----------------------------------------------------------------------------------------------------------
# weight / input helpers
# ----------------------------------------------------------------------------------------------------------
_NORMS = (nn.BatchNorm2d, nn.BatchNorm1d, nn.LayerNorm, nn.InstanceNorm2d, nn.GroupNorm)


@torch.no_grad()
def _randomize_and_calibrate(model: nn.Module, inputs: tuple, seed: int) -> nn.Module:
    """Random norm affine params / zero biases, then calibrate BatchNorm running stats on ``inputs``."""
    g = torch.Generator().manual_seed(seed + 1234)

    def uni(t: torch.Tensor, lo: float, hi: float) -> None:
        t.copy_(torch.rand(t.shape, generator=g) * (hi - lo) + lo)

    for m in model.modules():
        if isinstance(m, _NORMS):
            if getattr(m, "weight", None) is not None:
                uni(m.weight, 0.75, 1.25)
            if getattr(m, "bias", None) is not None:
                uni(m.bias, -0.1, 0.1)
        elif isinstance(m, (nn.Conv2d, nn.Linear)) and m.bias is not None and not m.bias.any():
            uni(m.bias, -0.05, 0.05)

    model.eval()
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if bns:
        saved = []
        for bn in bns:
            bn.reset_running_stats()
            saved.append(bn.momentum)
            bn.momentum = None  # cumulative average: one pass gives the batch statistics
            bn.train()
        model(*inputs)
        for bn, mom in zip(bns, saved):
            bn.momentum = mom
            bn.eval()
    return model.eval()


def _image(size: int, seed: int, channels: int = 3) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, channels, size, size, generator=g)


def _finish(model: nn.Module, inputs: tuple, seed: int) -> tuple[nn.Module, tuple]:
    model = _randomize_and_calibrate(model, inputs, seed)
    for p in model.parameters():
        p.requires_grad_(False)
    return model, inputs


# ----------------------------------------------------------------------------------------------------------
# candy: fast-neural-style TransformerNet
# ----------------------------------------------------------------------------------------------------------
class _ReflConv(nn.Module):
    def __init__(self, cin: int, cout: int, k: int, stride: int):
        super().__init__()
        self.reflection_pad = nn.ReflectionPad2d(k // 2)
        self.conv2d = nn.Conv2d(cin, cout, k, stride)

    def forward(self, x):
        return self.conv2d(self.reflection_pad(x))


class _StyleResidual(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.conv1 = _ReflConv(c, c, 3, 1)
        self.in1 = nn.InstanceNorm2d(c, affine=True)
        self.conv2 = _ReflConv(c, c, 3, 1)
        self.in2 = nn.InstanceNorm2d(c, affine=True)
        self.relu = nn.ReLU()

    def forward(self, x):
        out = self.relu(self.in1(self.conv1(x)))
        out = self.in2(self.conv2(out))
        return out + x


class _UpsampleConv(nn.Module):
    def __init__(self, cin: int, cout: int, k: int, stride: int, upsample: Optional[int] = None):
        super().__init__()
        self.upsample = upsample
        self.reflection_pad = nn.ReflectionPad2d(k // 2)
        self.conv2d = nn.Conv2d(cin, cout, k, stride)

    def forward(self, x):
        if self.upsample:
            x = F.interpolate(x, scale_factor=self.upsample, mode="nearest")
        return self.conv2d(self.reflection_pad(x))


class TransformerNet(nn.Module):
    def __init__(self, n_res: int = 5):
        super().__init__()
        self.conv1 = _ReflConv(3, 32, 9, 1)
        self.in1 = nn.InstanceNorm2d(32, affine=True)
        self.conv2 = _ReflConv(32, 64, 3, 2)
        self.in2 = nn.InstanceNorm2d(64, affine=True)
        self.conv3 = _ReflConv(64, 128, 3, 2)
        self.in3 = nn.InstanceNorm2d(128, affine=True)
        self.res = nn.Sequential(*[_StyleResidual(128) for _ in range(n_res)])
        self.deconv1 = _UpsampleConv(128, 64, 3, 1, upsample=2)
        self.in4 = nn.InstanceNorm2d(64, affine=True)
        self.deconv2 = _UpsampleConv(64, 32, 3, 1, upsample=2)
        self.in5 = nn.InstanceNorm2d(32, affine=True)
        self.deconv3 = _ReflConv(32, 3, 9, 1)
        self.relu = nn.ReLU()

    def forward(self, x):
        y = self.relu(self.in1(self.conv1(x)))
        y = self.relu(self.in2(self.conv2(y)))
        y = self.relu(self.in3(self.conv3(y)))
        y = self.res(y)
        y = self.relu(self.in4(self.deconv1(y)))
        y = self.relu(self.in5(self.deconv2(y)))
        return self.deconv3(y)


def build_candy(size: Size = None, depth: Optional[int] = None, seed: int = 0):
    s = resolve_size("candy", size)
    if s % 4:
        raise ValueError("candy: size must be a multiple of 4")
    torch.manual_seed(seed)
    model = TransformerNet(_resolve_depth("candy", depth))
    return _finish(model, (_image(s, seed),), seed)


# ----------------------------------------------------------------------------------------------------------
# segformer_b0: HuggingFace transformers
# ----------------------------------------------------------------------------------------------------------
class SegformerLogits(nn.Module):
    """Wraps ``SegformerForSemanticSegmentation`` so that ``forward`` returns the logits tensor only."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, pixel_values):
        return self.model(pixel_values=pixel_values).logits


def build_segformer_b0(size: Size = None, depth: Optional[int] = None, seed: int = 0):
    s = resolve_size("segformer_b0", size)
    _resolve_depth("segformer_b0", depth)
    if s % 32:
        raise ValueError("segformer_b0: size must be a multiple of 32")
    try:
        from transformers import SegformerConfig, SegformerForSemanticSegmentation
    except ImportError as e:  # pragma: no cover - depends on the bench extra
        raise ImportError("segformer_b0 needs `transformers` (see bench/README.md: pip install --no-deps)") from e
    torch.manual_seed(seed)
    config = SegformerConfig(num_labels=150)  # defaults are B0: depths 2,2,2,2; hidden 32,64,160,256
    model = SegformerLogits(SegformerForSemanticSegmentation(config))
    return _finish(model, (_image(s, seed),), seed)


# ----------------------------------------------------------------------------------------------------------
# efficientvit_b0 (MIT-Han-lab EfficientViT, timm efficientvit_mit.py)
# ----------------------------------------------------------------------------------------------------------
class _EvConvNormAct(nn.Module):
    def __init__(self, cin, cout, k=1, stride=1, groups=1, bias=False, norm=True, act=None):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, padding=k // 2, groups=groups, bias=bias)
        self.norm = nn.BatchNorm2d(cout) if norm else nn.Identity()
        self.act = act() if act is not None else nn.Identity()

    def forward(self, x):
        return self.act(self.norm(self.conv(x)))


class _EvDSConv(nn.Module):
    def __init__(self, cin, cout, stride=1, act=nn.Hardswish):
        super().__init__()
        self.depth_conv = _EvConvNormAct(cin, cin, 3, stride, groups=cin, act=act)
        self.point_conv = _EvConvNormAct(cin, cout, 1)

    def forward(self, x):
        return self.point_conv(self.depth_conv(x))


class _EvMBConv(nn.Module):
    def __init__(self, cin, cout, stride=1, expand_ratio=4.0, fewer_norm=False, act=nn.Hardswish):
        super().__init__()
        mid = round(cin * expand_ratio)
        self.inverted_conv = _EvConvNormAct(cin, mid, 1, bias=fewer_norm, norm=not fewer_norm, act=act)
        self.depth_conv = _EvConvNormAct(mid, mid, 3, stride, groups=mid, bias=fewer_norm, norm=not fewer_norm,
                                         act=act)
        self.point_conv = _EvConvNormAct(mid, cout, 1)

    def forward(self, x):
        return self.point_conv(self.depth_conv(self.inverted_conv(x)))


class LiteMLA(nn.Module):
    """Lightweight multi-scale linear attention (ReLU kernel, 5x5 depthwise aggregation)."""

    def __init__(self, cin, cout, dim=16, scales=(5,), eps=1e-5):
        super().__init__()
        self.eps = eps
        self.dim = dim
        heads = cin // dim
        total = heads * dim
        self.qkv = _EvConvNormAct(cin, 3 * total, 1, norm=False)
        self.aggreg = nn.ModuleList([
            nn.Sequential(
                nn.Conv2d(3 * total, 3 * total, s, padding=s // 2, groups=3 * total, bias=False),
                nn.Conv2d(3 * total, 3 * total, 1, groups=3 * heads, bias=False),
            ) for s in scales
        ])
        self.kernel_func = nn.ReLU()
        self.proj = _EvConvNormAct(total * (1 + len(scales)), cout, 1)

    def forward(self, x):
        B, _, H, W = x.shape
        qkv = self.qkv(x)
        ms = [qkv] + [op(qkv) for op in self.aggreg]
        ms = torch.cat(ms, dim=1)
        ms = ms.reshape(B, -1, 3 * self.dim, H * W).transpose(-1, -2)
        q, k, v = ms.chunk(3, dim=-1)
        q = self.kernel_func(q)
        k = self.kernel_func(k)
        v = F.pad(v, (0, 1), mode="constant", value=1.0)
        kv = k.transpose(-1, -2) @ v
        out = q @ kv
        out = out[..., :-1] / (out[..., -1:] + self.eps)
        out = out.transpose(-1, -2).reshape(B, -1, H, W)
        return self.proj(out)


class _Residual(nn.Module):
    def __init__(self, main: nn.Module, shortcut: bool = True):
        super().__init__()
        self.main = main
        self.shortcut = shortcut

    def forward(self, x):
        return self.main(x) + x if self.shortcut else self.main(x)


class _EvBlock(nn.Module):
    def __init__(self, c, head_dim=16, expand_ratio=4.0, act=nn.Hardswish):
        super().__init__()
        self.context_module = _Residual(LiteMLA(c, c, dim=head_dim))
        self.local_module = _Residual(_EvMBConv(c, c, 1, expand_ratio, fewer_norm=True, act=act))

    def forward(self, x):
        return self.local_module(self.context_module(x))


class EfficientVit(nn.Module):
    def __init__(self, widths=(8, 16, 32, 64, 128), depths=(1, 2, 2, 2, 2), head_dim=16, expand_ratio=4.0,
                 head_widths=(1024, 1280), num_classes=1000, act=nn.Hardswish):
        super().__init__()
        stem = [_EvConvNormAct(3, widths[0], 3, 2, act=act)]
        stem += [_Residual(_EvDSConv(widths[0], widths[0], 1, act=act)) for _ in range(depths[0])]
        self.stem = nn.Sequential(*stem)
        stages = []
        cin = widths[0]
        for i, (w, d) in enumerate(zip(widths[1:], depths[1:])):
            vit = i >= 2
            blocks: list[nn.Module] = [_Residual(_EvMBConv(cin, w, 2, expand_ratio, fewer_norm=vit, act=act), False)]
            if vit:
                blocks += [_EvBlock(w, head_dim, expand_ratio, act) for _ in range(d)]
            else:
                blocks += [_Residual(_EvMBConv(w, w, 1, expand_ratio, act=act)) for _ in range(1, d)]
            stages.append(nn.Sequential(*blocks))
            cin = w
        self.stages = nn.Sequential(*stages)
        self.head_in_conv = _EvConvNormAct(cin, head_widths[0], 1, act=act)
        self.global_pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(head_widths[0], head_widths[1], bias=False),
            nn.LayerNorm(head_widths[1], eps=1e-5),
            act(),
            nn.Linear(head_widths[1], num_classes),
        )

    def forward(self, x):
        x = self.stages(self.stem(x))
        x = self.global_pool(self.head_in_conv(x)).flatten(1)
        return self.classifier(x)


def build_efficientvit_b0(size: Size = None, depth: Optional[int] = None, seed: int = 0):
    s = resolve_size("efficientvit_b0", size)
    _resolve_depth("efficientvit_b0", depth)
    if s % 32:
        raise ValueError("efficientvit_b0: size must be a multiple of 32")
    torch.manual_seed(seed)
    model = EfficientVit()
    return _finish(model, (_image(s, seed),), seed)


# ----------------------------------------------------------------------------------------------------------
# vit_tiny: ViT-Tiny/16 (timm vit_tiny_patch16_224)
# ----------------------------------------------------------------------------------------------------------
class _VitAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q = q * self.scale
        attn = (q @ k.transpose(-2, -1)).softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class _VitBlock(nn.Module):
    def __init__(self, dim, heads, mlp_ratio=4.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = _VitAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        hidden = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(self, img_size=224, patch=16, dim=192, depth=12, heads=3, num_classes=1000):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        n = (img_size // patch) ** 2
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 1e-6)
        self.pos_embed = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[_VitBlock(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = x + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


def build_vit_tiny(size: Size = None, depth: Optional[int] = None, seed: int = 0):
    s = resolve_size("vit_tiny", size)
    if s % 16:
        raise ValueError("vit_tiny: size must be a multiple of 16")
    torch.manual_seed(seed)
    model = VisionTransformer(img_size=s, depth=_resolve_depth("vit_tiny", depth))
    return _finish(model, (_image(s, seed),), seed)


# ----------------------------------------------------------------------------------------------------------
# gpt2_block: GPT-2 style decoder blocks on hidden states
# ----------------------------------------------------------------------------------------------------------
class _Gpt2Attention(nn.Module):
    def __init__(self, dim, heads, seq):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        causal = torch.tril(torch.ones(seq, seq, dtype=torch.bool))
        # additive causal mask, a constant of the graph: 0 where attended, finfo.min where masked
        mask = torch.zeros(seq, seq).masked_fill(~causal, torch.finfo(torch.float32).min)
        self.register_buffer("mask", mask.view(1, 1, seq, seq), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.heads, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.heads, self.head_dim).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        att = (att + self.mask).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.c_proj(y)


class _Gpt2Block(nn.Module):
    def __init__(self, dim, heads, seq):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=1e-5)
        self.attn = _Gpt2Attention(dim, heads, seq)
        self.ln_2 = nn.LayerNorm(dim, eps=1e-5)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt2Decoder(nn.Module):
    def __init__(self, dim=768, heads=12, seq=128, n_layer=2):
        super().__init__()
        self.h = nn.Sequential(*[_Gpt2Block(dim, heads, seq) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(dim, eps=1e-5)

    def forward(self, hidden_states):
        return self.ln_f(self.h(hidden_states))


def build_gpt2_block(size: Size = None, depth: Optional[int] = None, seed: int = 0):
    seq = resolve_size("gpt2_block", size)
    torch.manual_seed(seed)
    model = Gpt2Decoder(seq=seq, n_layer=_resolve_depth("gpt2_block", depth))
    for m in model.modules():  # GPT-2 init: N(0, 0.02)
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, seq, 768, generator=g)
    return _finish(model, (x,), seed)


# ----------------------------------------------------------------------------------------------------------
# cspdarknet53_mish (timm cspnet.py cspdarknet53, act_layer=mish)
# ----------------------------------------------------------------------------------------------------------
class _ConvBnAct(nn.Module):
    def __init__(self, cin, cout, k=1, stride=1, act=True):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, padding=k // 2, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.act = nn.Mish() if act else nn.Identity()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class _DarkBlock(nn.Module):
    def __init__(self, cin, cout, bottle_ratio):
        super().__init__()
        mid = int(round(cout * bottle_ratio))
        self.conv1 = _ConvBnAct(cin, mid, 1)
        self.conv2 = _ConvBnAct(mid, cout, 3)

    def forward(self, x):
        return self.conv2(self.conv1(x)) + x


class _CrossStage(nn.Module):
    def __init__(self, cin, cout, depth, expand_ratio, bottle_ratio, block_ratio):
        super().__init__()
        self.conv_down = _ConvBnAct(cin, cout, 3, 2)  # down_growth=True: downsample straight to cout
        self.expand_chs = exp = int(round(cout * expand_ratio))
        block_out = int(round(cout * block_ratio))
        self.conv_exp = _ConvBnAct(cout, exp, 1)
        prev = exp // 2
        blocks = []
        for _ in range(depth):
            blocks.append(_DarkBlock(prev, block_out, bottle_ratio))
            prev = block_out
        self.blocks = nn.Sequential(*blocks)
        self.conv_transition_b = _ConvBnAct(prev, exp // 2, 1)
        self.conv_transition = _ConvBnAct(exp, cout, 1)

    def forward(self, x):
        x = self.conv_exp(self.conv_down(x))
        xs, xb = x.split(self.expand_chs // 2, dim=1)
        xb = self.conv_transition_b(self.blocks(xb))
        return self.conv_transition(torch.cat([xs, xb], dim=1))


class CspDarknet53(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.stem = _ConvBnAct(3, 32, 3, 1)
        cfg = dict(
            depth=(1, 2, 8, 8, 4),
            out_chs=(64, 128, 256, 512, 1024),
            expand_ratio=(2.0, 1.0, 1.0, 1.0, 1.0),
            bottle_ratio=(0.5, 1.0, 1.0, 1.0, 1.0),
            block_ratio=(1.0, 0.5, 0.5, 0.5, 0.5),
        )
        stages, prev = [], 32
        for d, c, e, b, r in zip(*cfg.values()):
            stages.append(_CrossStage(prev, c, d, e, b, r))
            prev = c
        self.stages = nn.Sequential(*stages)
        self.global_pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(prev, num_classes)

    def forward(self, x):
        x = self.stages(self.stem(x))
        return self.fc(self.global_pool(x).flatten(1))


def build_cspdarknet53_mish(size: Size = None, depth: Optional[int] = None, seed: int = 0):
    s = resolve_size("cspdarknet53_mish", size)
    _resolve_depth("cspdarknet53_mish", depth)
    if s % 32:
        raise ValueError("cspdarknet53_mish: size must be a multiple of 32")
    torch.manual_seed(seed)
    model = CspDarknet53()
    for m in model.modules():  # timm _init_weights
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
    return _finish(model, (_image(s, seed),), seed)


# ----------------------------------------------------------------------------------------------------------
# resnet50, mobilenetv3_large: torchvision architectures, own definitions (bench/convnets.py)
# ----------------------------------------------------------------------------------------------------------
def build_resnet50(size: Size = None, depth: Optional[int] = None, seed: int = 0):
    from bench.convnets import ResNet50

    s = resolve_size("resnet50", size)
    _resolve_depth("resnet50", depth)
    if s % 32:
        raise ValueError("resnet50: size must be a multiple of 32")
    torch.manual_seed(seed)
    return _finish(ResNet50(), (_image(s, seed),), seed)


def build_mobilenetv3_large(size: Size = None, depth: Optional[int] = None, seed: int = 0):
    from bench.convnets import MobileNetV3Large

    s = resolve_size("mobilenetv3_large", size)
    _resolve_depth("mobilenetv3_large", depth)
    if s % 32:
        raise ValueError("mobilenetv3_large: size must be a multiple of 32")
    torch.manual_seed(seed)
    return _finish(MobileNetV3Large(), (_image(s, seed),), seed)


# ----------------------------------------------------------------------------------------------------------
# gpt2, bert_base: transformers models from configs with random weights (bench/language_models.py)
# ----------------------------------------------------------------------------------------------------------
def build_gpt2(size: Size = None, depth: Optional[int] = None, seed: int = 0):
    from bench.language_models import gpt2

    model, inputs = gpt2(resolve_size("gpt2", size), _resolve_depth("gpt2", depth), seed)
    return _finish(model, inputs, seed)


def build_bert_base(size: Size = None, depth: Optional[int] = None, seed: int = 0):
    from bench.language_models import bert

    model, inputs = bert(resolve_size("bert_base", size), _resolve_depth("bert_base", depth), seed)
    return _finish(model, inputs, seed)


# ----------------------------------------------------------------------------------------------------------
# poolformer_s12, efficientnet_b0: transformers vision models from configs (bench/hf_vision.py)
# ----------------------------------------------------------------------------------------------------------
def _hf_vision(name: str, size: Size, depth: Optional[int], seed: int):
    from bench import hf_vision

    s = resolve_size(name, size)
    _resolve_depth(name, depth)
    if s % 32:
        raise ValueError(f"{name}: size must be a multiple of 32")
    return _finish(getattr(hf_vision, name)(s, seed), (_image(s, seed),), seed)


def build_poolformer_s12(size: Size = None, depth: Optional[int] = None, seed: int = 0):
    return _hf_vision("poolformer_s12", size, depth, seed)


def build_efficientnet_b0(size: Size = None, depth: Optional[int] = None, seed: int = 0):
    return _hf_vision("efficientnet_b0", size, depth, seed)


# ----------------------------------------------------------------------------------------------------------
MODELS: dict[str, Callable[..., tuple[nn.Module, tuple]]] = {
    "candy": build_candy,
    "segformer_b0": build_segformer_b0,
    "efficientvit_b0": build_efficientvit_b0,
    "vit_tiny": build_vit_tiny,
    "gpt2_block": build_gpt2_block,
    "cspdarknet53_mish": build_cspdarknet53_mish,
    "resnet50": build_resnet50,
    "mobilenetv3_large": build_mobilenetv3_large,
    "gpt2": build_gpt2,
    "bert_base": build_bert_base,
    "poolformer_s12": build_poolformer_s12,
    "efficientnet_b0": build_efficientnet_b0,
}


def build_model(name: str, size: Size = None, depth: Optional[int] = None, seed: int = 0):
    """``MODELS[name](size=size, depth=depth, seed=seed)`` with a clear error for unknown names."""
    try:
        builder = MODELS[name]
    except KeyError:
        raise KeyError(f"unknown bench model {name!r}; known: {sorted(MODELS)}") from None
    return builder(size=size, depth=depth, seed=seed)
