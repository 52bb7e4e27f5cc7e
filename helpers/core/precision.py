"""Matmul precision as a setting: ``ICL_TF32=1`` lets float32 matmuls on CUDA use TF32 tensor cores.

float32 stays the default: every recorded result is float32 unless a setting says otherwise. Two settings
trade accuracy for speed on a GPU, each applied in one place when a model is loaded
(:func:`helpers.core.models.load_model`):

* ``ICL_DTYPE`` (``bfloat16``, ``float16``): the weights and activations in 16 bits (half the memory);
* ``ICL_TF32=1``: the weights stay float32, but CUDA's matmuls round their inputs to TF32 (10-bit mantissa,
  float32's range) and accumulate in float32 (``torch.backends.cuda.matmul.allow_tf32``,
  ``torch.set_float32_matmul_precision("high")``). Measured on one H100 with a GPT2-XL-shaped model, it
  took a plain forward from 27.6 to 53.0 TFLOP/s (``benchmarks/gpu/``).

TF32 is a mode of NVIDIA's tensor cores: on a CPU the switch does nothing (it is not applied there, so a CPU's
float32 matmuls are never lowered). A model loaded with it gets ``cfg.icl_tf32 = True``, which enters its
fingerprint (:func:`helpers.core.store.model_fingerprint`): stored results of TF32 and float32 runs never mix.
How far each setting moves the experiments' outputs is measured by ``scripts/precision.py`` (docs/gpu.md).
"""

from __future__ import annotations

import os

import torch

from helpers.core.sizing import on_cuda

__all__ = ["TF32_ENV", "tf32_requested", "apply_matmul_precision"]

TF32_ENV = "ICL_TF32"


def tf32_requested() -> bool:
    """``$ICL_TF32``: ``1`` on, ``0`` or unset (or empty) off; anything else is refused."""
    raw = os.environ.get(TF32_ENV, "").strip()
    if raw not in ("", "0", "1"):
        raise ValueError(f"{TF32_ENV}={raw!r}: give 1 (TF32 matmuls on CUDA) or 0 (float32 matmuls, the default)")
    return raw == "1"


def apply_matmul_precision(model) -> bool:
    """Turn on TF32 matmuls for ``model`` when ``$ICL_TF32=1`` and the model is on CUDA; True if it did.

    The switch is process-wide in torch (every CUDA float32 matmul after it), so it is applied only on request.
    """
    if not tf32_requested() or not on_cuda(model):
        return False
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("high")
    model.cfg.icl_tf32 = True
    return True
