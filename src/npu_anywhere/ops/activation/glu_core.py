"""Shared math of the activation family: SiLU/GELU and their derivatives, and the GLU split.

Every helper here computes in the *compute dtype* (:func:`compute_dtype`: float32 for
float16/bfloat16/float32 inputs, float64 for float64) and returns that dtype; callers round
once to their output dtype.  The helpers are plain PyTorch, so they trace under FakeTensor and
``torch.compile``.

GLU conventions (the ones the torch_npu / CANN docs use):

* ``dim`` names the axis that is cut into two equal halves, ``first`` (``A``, the left half) and
  ``second`` (``B``, the right half).
* ``activate_left=True`` applies the activation to the left half: ``act(A) * B``;
  ``activate_left=False`` applies it to the right half: ``A * act(B)``.  This is the meaning of
  ``activate_left`` in ``npu_geglu`` (aclnnGeGluV3), ``npu_swiglu_quant`` and
  ``npu_dequant_swiglu_quant`` (seed 004: "取True时, out=swish(split[x,-1,2][0])*split[x,-1,2][1]").
  Note that ``npu_swiglu`` itself activates the *left* half (seed 004: ``swish(A) * B``), i.e. it
  is ``swiglu_fp32(x, dim, activate_left=True)``.

API for the quantizing SwiGLU ops (``npu_swiglu_quant``, ``npu_dequant_swiglu_quant``)::

    swiglu_fp32(x, dim=-1, activate_left=False) -> Tensor        # float32 (float64 for float64)
    clipped_glu_fp32(gate, linear, *, alpha, limit, bias) -> Tensor
    glu_halves(x, dim=-1, interleaved=False) -> (first, second)
"""

from __future__ import annotations

import math

import torch

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
GELU_TANH_COEFF = 0.044715
INV_SQRT_2 = 1.0 / math.sqrt(2.0)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)

GELU_MODES = {0: "none", 1: "tanh"}
"""``approximate`` integer codes of ``npu_geglu`` (0: erf form, 1: tanh form)."""


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64; every other floating dtype is computed in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def upcast(t: torch.Tensor) -> torch.Tensor:
    """``t`` in its compute dtype (no copy when it already is)."""
    return t.to(compute_dtype(t.dtype))


def glu_halves(x: torch.Tensor, dim: int = -1,
               interleaved: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Split ``x`` into (first, second) along ``dim``: halves, or even/odd positions.

    ``interleaved=True`` takes ``x[..., 0::2]`` and ``x[..., 1::2]`` along ``dim``.  Views, in
    the input dtype.
    """
    if interleaved:
        lead = (slice(None),) * (dim % x.dim())
        return x[lead + (slice(0, None, 2),)], x[lead + (slice(1, None, 2),)]
    return x.chunk(2, dim)


def silu(x: torch.Tensor) -> torch.Tensor:
    """``x * sigmoid(x)`` (``x`` already in its compute dtype)."""
    return torch.nn.functional.silu(x)


def silu_derivative(x: torch.Tensor) -> torch.Tensor:
    """d/dx silu(x) = sigmoid(x) * (1 + x * (1 - sigmoid(x)))."""
    s = torch.sigmoid(x)
    return s * (1 + x * (1 - s))


def gelu(x: torch.Tensor, approximate: str) -> torch.Tensor:
    """GELU in its erf form (``'none'``) or tanh form (``'tanh'``)::

        none: 0.5 * x * (1 + erf(x / sqrt(2)))
        tanh: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
    """
    return torch.nn.functional.gelu(x, approximate=approximate)


def gelu_derivative(x: torch.Tensor, approximate: str) -> torch.Tensor:
    """d/dx of :func:`gelu`.

    none: Phi(x) + x * phi(x);   tanh: 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 c x^2)
    with t = tanh(sqrt(2/pi) (x + c x^3)), c = 0.044715.
    """
    if approximate == "tanh":
        x2 = x * x
        t = torch.tanh(SQRT_2_OVER_PI * x * (1 + GELU_TANH_COEFF * x2))
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * SQRT_2_OVER_PI * (
            1 + 3 * GELU_TANH_COEFF * x2)
    cdf = 0.5 * (1 + torch.erf(x * INV_SQRT_2))
    return cdf + x * torch.exp(-0.5 * x * x) * INV_SQRT_2PI


def swiglu_fp32(x: torch.Tensor, dim: int = -1, activate_left: bool = False) -> torch.Tensor:
    """SwiGLU of ``x`` split in halves along ``dim``, in the compute dtype (not rounded).

    ``activate_left=True``: ``silu(A) * B``; ``False``: ``A * silu(B)``, where ``A``/``B`` are
    the left/right halves.  ``npu_swiglu`` is ``activate_left=True``.
    """
    first, second = glu_halves(x, dim)
    gate, linear = (first, second) if activate_left else (second, first)
    return silu(upcast(gate)) * upcast(linear)


def swiglu_grad_fp32(grad: torch.Tensor, x: torch.Tensor, dim: int = -1,
                     activate_left: bool = False) -> torch.Tensor:
    """Gradient of :func:`swiglu_fp32` w.r.t. ``x`` (same shape as ``x``), compute dtype."""
    first, second = glu_halves(x, dim)
    gate, linear = (first, second) if activate_left else (second, first)
    g, gate, linear = upcast(grad), upcast(gate), upcast(linear)
    d_gate = g * linear * silu_derivative(gate)
    d_linear = g * silu(gate)
    parts = (d_gate, d_linear) if activate_left else (d_linear, d_gate)
    return torch.cat(parts, dim)


def clipped_glu_fp32(gate: torch.Tensor, linear: torch.Tensor, *, alpha: float, limit: float,
                     bias: float) -> torch.Tensor:
    """GPT-OSS clipped SwiGLU on already split halves, in the compute dtype::

        gate   = gate.clamp(max=limit);  linear = linear.clamp(-limit, limit)
        y      = gate * sigmoid(alpha * gate) * (linear + bias)
    """
    g = upcast(gate).clamp(max=limit)
    lin = upcast(linear).clamp(min=-limit, max=limit)
    return g * torch.sigmoid(alpha * g) * (lin + bias)
