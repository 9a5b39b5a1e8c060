"""Shared RMSNorm core: every RMSNorm-based op of the family (and the fused-quant variants
built on it) computes through :func:`rms_norm_fp32` / :func:`add_rms_norm_fp32`.

Math (aclnnRmsNorm, hicann/ops-nn ``norm/rms_norm/docs/aclnnRmsNorm.md``)::

    rstd = 1 / sqrt(mean(x^2 over the normalized dims) + epsilon)
    y    = x * rstd * gamma              (gemma:  x * rstd * (1 + gamma))

The normalized dims are the trailing ``gamma.dim()`` dims of ``x``; ``rstd`` keeps them as
size-1 dims: ``rstd.shape == x.shape[:-k] + (1,) * k`` (op-plugin ``rms_norm_npu_output_size``).

Precision order, as the NPU kernels do it (hicann/ops-nn ``norm/rms_norm/op_kernel/rms_norm.h``,
``norm/add_rms_norm/op_kernel/add_rms_norm.h`` and the ``tests/assets/golden.py`` of both):

* ``x`` (float16/bfloat16) is upcast to float32; the sum of squares, the mean, ``rstd`` and
  ``x * rstd * gamma`` are float32; ``y`` is rounded once to the output dtype.  This is the
  RmsNorm / GemmaRmsNorm kernel on every product, and AddRmsNorm on Ascend 950.
* Exception (``round_normalized``): the A2/A3/310P AddRmsNorm kernels round ``x * rstd`` to the
  input dtype *before* multiplying by gamma (``y = round(round(x * rstd) * gamma)``), and so does
  the Atlas training (910) RmsNorm kernel for float16 (``rms_norm_whole_reduce_sum.h``).
* AddRmsNorm: ``x = x1 + x2`` is rounded to the input dtype and the norm is computed from the
  rounded sum on A2/A3/310P; Ascend 950 normalizes the float32 sum and only rounds the ``x``
  output (``add_rms_norm/tests/assets/golden.py``: ``add_rms_golden_v1`` vs ``_v2``).

float64 inputs (accepted outside strict mode) are computed in float64 throughout.

API (stable; the fused-quant ops import it):

* :func:`compute_dtype`, :func:`rstd_shape`, :func:`norm_dims`
* :func:`check_gamma` -- shape relation gamma == x.shape[-k:]
* :func:`rms_norm_fp32` -> ``(y, rstd)`` in the compute dtype, ``y`` not rounded
* :func:`add_rms_norm_fp32` -> ``(y, rstd, x_sum)``; ``x_sum`` already in the input dtype
* :func:`rounds_intermediates` -- True unless strict mode targets Ascend 950
* :func:`register_compiled` -- a compiled provider for a body taking a numerics flag
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, Optional, Sequence

import torch

from ... import checks, targets
from ...kernels.compiled import CompiledProvider
from ...targets import Product

MAX_DIMS = 8


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for float16/bfloat16/float32 inputs, float64 for float64."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def stat_dtype(dtype: torch.dtype) -> torch.dtype:
    """dtype of rstd (and of the float32 outputs): float32, float64 for float64 inputs."""
    return compute_dtype(dtype)


def norm_dims(x_dim: int, gamma_dim: int) -> tuple[int, ...]:
    """The trailing ``gamma_dim`` dims of an ``x_dim``-D tensor."""
    return tuple(range(x_dim - gamma_dim, x_dim))


def rstd_shape(x_shape: Sequence[int], gamma_dim: int) -> tuple[int, ...]:
    """``x.shape[:-k] + (1,) * k`` with ``k = gamma.dim()``."""
    lead = len(x_shape) - gamma_dim
    return tuple(x_shape[:lead]) + (1,) * gamma_dim


def check_gamma(op: str, x: torch.Tensor, gamma: torch.Tensor, *, x_name: str = "self",
                gamma_name: str = "gamma") -> None:
    """gamma has 1..x.dim() dims, equal to the trailing dims of x, and is not empty."""
    checks.expect(1 <= x.dim() <= MAX_DIMS, op, x_name, lambda: f"a 1-D to {MAX_DIMS}-D tensor",
                  lambda: f"shape {tuple(x.shape)}", ValueError)
    k = gamma.dim()
    checks.expect(1 <= k <= x.dim(), op, gamma_name,
                  lambda: f"a 1-D to {x.dim()}-D tensor (at most {x_name}.dim() dims)",
                  lambda: f"shape {tuple(gamma.shape)}", ValueError)
    tail = tuple(x.shape[x.dim() - k:])
    checks.expect(tuple(gamma.shape) == tail, op, gamma_name,
                  lambda: f"the trailing dims of {x_name} {tail} (gamma_shape = "
                  f"{x_name}_shape[n:])", lambda: tuple(gamma.shape))
    checks.expect(gamma.numel() != 0, op, gamma_name, "a non-empty tensor",
                  lambda: f"shape {tuple(gamma.shape)}", ValueError)


def rounds_intermediates() -> bool:
    """Whether the active product's AddRmsNorm kernel rounds intermediates to the input dtype.

    True in default mode and for A2/A3/310P (the kernels most users run), False for Ascend 950.
    Read outside compiled code (``torch.compile`` cannot trace the strict-mode context var).
    """
    return targets.current() is not Product.ASCEND_950


def rms_norm_fp32(x: torch.Tensor, gamma: torch.Tensor, epsilon: float, *,
                  gemma: bool = False, beta: Optional[torch.Tensor] = None,
                  round_normalized: Optional[torch.dtype] = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm of ``x`` over its trailing ``gamma.dim()`` dims, in float32 (float64 for float64).

    Parameters
    ----------
    x : Tensor
        Any float dtype; upcast to the compute dtype.
    gamma : Tensor
        Shape ``x.shape[-k:]``; any float dtype (upcast).
    epsilon : float
        Added to the mean of squares.
    gemma : bool
        Multiply by ``1 + gamma`` (GemmaRmsNorm) instead of ``gamma``.
    beta : Tensor, optional
        Added after the gamma multiply (the ``beta`` of the fused quant ops).
    round_normalized : torch.dtype, optional
        Round ``x * rstd`` to this dtype before multiplying by gamma (A2/A3 AddRmsNorm).

    Returns
    -------
    (y, rstd)
        ``y`` has x's shape, ``rstd`` has :func:`rstd_shape`; both in the compute dtype, not
        rounded -- the caller rounds ``y`` once to its output dtype.
    """
    ct = compute_dtype(x.dtype)
    xc = x.to(ct)
    dims = norm_dims(x.dim(), gamma.dim())
    rstd = torch.rsqrt(xc.square().mean(dims, keepdim=True) + epsilon)
    y = xc * rstd
    if round_normalized is not None and round_normalized != ct:
        y = y.to(round_normalized).to(ct)
    g = gamma.to(ct)
    if gemma:
        g = g + 1.0
    y = y.mul_(g)
    if beta is not None:
        y = y.add_(beta.to(ct))
    return y, rstd


def add_rms_norm_fp32(x1: torch.Tensor, x2: torch.Tensor, gamma: torch.Tensor, epsilon: float,
                      *, round_sum: bool = True, round_normalized: bool = True,
                      gemma: bool = False, beta: Optional[torch.Tensor] = None
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``x = x1 + x2`` then RMSNorm of x.

    ``round_sum``: the norm sees x rounded to ``x1.dtype`` (A2/A3/310P) rather than the float32
    sum (950).  ``round_normalized``: ``x * rstd`` is rounded to ``x1.dtype`` before the gamma
    multiply (A2/A3/310P).  Pass :func:`rounds_intermediates` for both to follow the product.

    Returns ``(y, rstd, x)``: y and rstd in the compute dtype (y not rounded), x in x1's dtype.
    """
    ct = compute_dtype(x1.dtype)
    total = x1.to(ct) + x2.to(ct)
    x = total.to(x1.dtype)
    source = x if round_sum else total
    y, rstd = rms_norm_fp32(source, gamma, epsilon, gemma=gemma, beta=beta,
                            round_normalized=x1.dtype if round_normalized else None)
    return y, rstd, x


# -- compiled providers ------------------------------------------------------------------------

def register_compiled(op, body: Callable[..., Any], key: Callable[..., Hashable],
                      numerics: Callable[..., Hashable],
                      bind: Callable[..., tuple]) -> CompiledProvider:
    """Add a ``compiled`` provider to ``op`` that runs ``body(*bind(...), numerics(...))``.

    ``bind(*args, **kwargs)`` turns the dispatcher's call (defaults may be missing) into the
    full positional tuple; ``numerics(*args, **kwargs)`` reads whatever depends on strict mode
    outside compiled code and is passed to ``body`` as a trailing constant (and keyed on), so
    each numerics variant gets its own compiled code.
    """

    def full(args, kwargs):
        return (*bind(*args, **kwargs), numerics(*args, **kwargs))

    provider = CompiledProvider(body, lambda *a: (key(*a[:-1]), a[-1]))

    def supports(*args, **kwargs):
        return provider.supports(*full(args, kwargs))

    def run(*args, **kwargs):
        return provider.run(*full(args, kwargs))

    op.add_provider(CompiledProvider.name, run, supports)
    return provider
