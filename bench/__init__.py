"""Benchmark models and ONNX export helpers for kernorch (not part of the ``kernorch`` package)."""
