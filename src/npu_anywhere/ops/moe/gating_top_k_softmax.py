"""torch_npu.npu_moe_gating_top_k_softmax and npu_moe_gating_top_k_softmax_v2.

Formula (seed 004; op-plugin test/test_custom_ops/test_npu_moe_gating_top_k_softmax.py and
test_npu_moe_gating_top_k_softmax_v2.py are the goldens followed)::

    p = softmax(x, -1)                       # float32 for 16-bit inputs
    y, expert_idx = top-k of p along -1      # stable: equal values keep the lower expert first
    expert_idx[finished rows] = E            # E = x.size(-1): a finished row routes nowhere
    row_idx[n, j] = j * N + n                # N = rows (leading dims flattened)

v2 adds ``renorm``: 0 is the formula above; 1 takes the top-k of ``x`` first and normalises the
k values with a softmax.  ``output_softmax`` (renorm 0 only) also returns ``p`` in float32.

Precision: v1's golden rounds ``p`` to the input dtype before the top-k (so the order of values
equal after rounding is by expert id); v2's golden ranks the float32 ``p`` and rounds after.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...kernels import compiled, cpu_top_k
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from ._routing import compute_dtype, expect_float, stable_top_k

OP = "npu_moe_gating_top_k_softmax"
SCHEMA = ("npu_moe_gating_top_k_softmax(Tensor x, Tensor? finished=None, int k=1) "
          "-> (Tensor, Tensor, Tensor)")
OP_V2 = "npu_moe_gating_top_k_softmax_v2"
SCHEMA_V2 = ("npu_moe_gating_top_k_softmax_v2(Tensor x, *, int k=1, Tensor? finished=None, "
             "int? renorm=0, bool? output_softmax=False) -> (Tensor, Tensor, Tensor)")

_SUPPORTED = frozenset({Product.A2, Product.A3})
_MAX_K = 1024


def _check_common(op: str, x, finished, k) -> None:
    expect_float(op, "x", x)
    checks.expect(x.dim() in (2, 3), op, "x", "a 2-D or 3-D tensor",
                  lambda: f"shape {tuple(x.shape)}", ValueError)
    experts = x.shape[-1]
    checks.expect(0 < k <= experts and k <= _MAX_K, op, "k",
                  lambda: f"in (0, min(x.size(-1), {_MAX_K})] = (0, {min(experts, _MAX_K)}]",
                  repr(k), ValueError)
    if finished is not None:
        checks.expect_dtype(finished, (torch.bool,), op, "finished")
        checks.expect(tuple(finished.shape) == tuple(x.shape[:-1]), op, "finished",
                      lambda: f"the shape x.shape[:-1] = {tuple(x.shape[:-1])}",
                      lambda: f"shape {tuple(finished.shape)}", RuntimeError)
        checks.expect_same_device({"x": x, "finished": finished}, op)
    targets.expect_supported(op, _SUPPORTED)


def check_gating_top_k_softmax(x, finished=None, k=1):
    _check_common(OP, x, finished, k)


def check_gating_top_k_softmax_v2(x, *, k=1, finished=None, renorm=0, output_softmax=False):
    _check_common(OP_V2, x, finished, k)
    checks.expect(renorm in (0, 1), OP_V2, "renorm", "0 (softmax, then top-k) or 1 (top-k, "
                  "then softmax)", repr(renorm), ValueError)


def _mask_finished(expert_idx: torch.Tensor, finished, experts: int) -> torch.Tensor:
    if finished is None:
        return expert_idx
    return expert_idx.masked_fill(finished.unsqueeze(-1), experts)


def _row_idx(shape, k: int, device) -> torch.Tensor:
    rows = 1
    for s in shape[:-1]:
        rows *= s
    # row_idx[n, j] = j * N + n: the (K, N) arange read transposed.
    flat = torch.arange(rows * k, dtype=torch.int32, device=device).view(k, rows).t()
    return flat.reshape(*shape[:-1], k).contiguous()


def gating_top_k_softmax_reference(x, finished=None, k=1):
    p = torch.softmax(x.to(compute_dtype(x.dtype)), dim=-1).to(x.dtype)
    y, idx = stable_top_k(p, k)
    expert_idx = _mask_finished(idx.to(torch.int32), finished, x.shape[-1])
    return y, expert_idx, _row_idx(x.shape, k, x.device)


def gating_top_k_softmax_v2_reference(x, *, k=1, finished=None, renorm=0, output_softmax=False):
    ct = compute_dtype(x.dtype)
    if renorm == 1:
        top, idx = stable_top_k(x, k)
        y = torch.softmax(top.to(ct), dim=-1).to(x.dtype)
        softmax_out = x.new_empty((0,), dtype=torch.float32)
    else:
        p = torch.softmax(x.to(ct), dim=-1)
        top, idx = stable_top_k(p, k)
        y = top.to(x.dtype)
        softmax_out = p.to(torch.float32) if output_softmax else \
            x.new_empty((0,), dtype=torch.float32)
    expert_idx = _mask_finished(idx.to(torch.int32), finished, x.shape[-1])
    return y, expert_idx, softmax_out


gating_top_k_softmax_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_gating_top_k_softmax,
                                reference=gating_top_k_softmax_reference, metadata_check=True,
                                info=OpInfo(api="torch_npu"))
gating_top_k_softmax_op.forbid_autograd("torch_npu defines no backward for it")
gating_top_k_softmax_v2_op = NpuOp(SCHEMA_V2, namespace=TORCH_NPU_NS,
                                   check=check_gating_top_k_softmax_v2,
                                   reference=gating_top_k_softmax_v2_reference,
                                   metadata_check=True, info=OpInfo(api="torch_npu"))
gating_top_k_softmax_v2_op.forbid_autograd("torch_npu defines no backward for it")


def _key_v1(x, finished=None, k=1):
    return ("v1", x.dtype, x.dim(), x.shape[-1], k, finished is not None, x.device.type)


def _key_v2(x, *, k=1, finished=None, renorm=0, output_softmax=False):
    return ("v2", x.dtype, x.dim(), x.shape[-1], k, finished is not None, renorm,
            bool(output_softmax), x.device.type)


# On the CPU the ranking, which is most of the time (ATen's topk took 3.2 ms of 3.6 for
# 4096 x 64, k = 8), runs in the C++ stable top-k; the softmax stays ATen's, the very calls of
# the reference, so the outputs are the reference's bit for bit.
def _cpp_supports_v1(x, finished=None, k=1):
    return cpu_top_k.supports(x, k)


def _cpp_v1(x, finished=None, k=1):
    p = torch.softmax(x.to(compute_dtype(x.dtype)), dim=-1).to(x.dtype)
    y, expert_idx = cpu_top_k.top_k(p, k, finished, x.shape[-1])
    return y, expert_idx, _row_idx(x.shape, k, x.device)


def _cpp_supports_v2(x, *, k=1, finished=None, renorm=0, output_softmax=False):
    return cpu_top_k.supports(x, k)


def _cpp_v2(x, *, k=1, finished=None, renorm=0, output_softmax=False):
    empty = x.new_empty((0,), dtype=torch.float32)
    if renorm == 1:
        top, expert_idx = cpu_top_k.top_k(x, k, finished, x.shape[-1])
        return torch.softmax(top.to(torch.float32), dim=-1).to(x.dtype), expert_idx, empty
    p = torch.softmax(x.to(torch.float32), dim=-1)
    top, expert_idx = cpu_top_k.top_k(p, k, finished, x.shape[-1])
    return top.to(x.dtype), expert_idx, (p if output_softmax else empty)


CPP_PROVIDER = "cpp_top_k"
gating_top_k_softmax_op.add_provider(CPP_PROVIDER, _cpp_v1, _cpp_supports_v1)
gating_top_k_softmax_v2_op.add_provider(CPP_PROVIDER, _cpp_v2, _cpp_supports_v2)

# Elsewhere (CUDA): the softmax and the ranking keys fused into one pass; the top-k is ATen's.
compiled.register(gating_top_k_softmax_op, key=_key_v1)
compiled.register(gating_top_k_softmax_v2_op, key=_key_v2)


def npu_moe_gating_top_k_softmax(x, finished=None, k=1):
    """Softmax over the experts, then the top ``k`` per row; also the source-row index.

    Formula (seed 004)::

        p = softmax(x, -1);  y, expert_idx = topk(p, k)   (ties: lower expert id first)
        expert_idx[finished] = E;  row_idx[n, j] = j * N + n

    Parameters
    ----------
    x : Tensor
        ``(N, E)`` or ``(B, S, E)``, float16, bfloat16 or float32.
    finished : Tensor of bool, optional
        Shape ``x.shape[:-1]``; True rows get expert id ``E`` (one past the last expert).
    k : int
        ``0 < k <= min(E, 1024)``.

    Returns
    -------
    (y, expert_idx, row_idx) : ``x``'s shape with the last dim ``k``; ``y`` in ``x``'s dtype,
    the other two int32.  ``row_idx`` is the layout ``npu_moe_init_routing`` expects.

    Constraints
    -----------
    Strict mode: A2 and A3.

    Notes
    -----
    The softmax is computed in float32 and rounded to ``x``'s dtype before ranking, as op-plugin's
    golden (test_npu_moe_gating_top_k_softmax.py) does.  Inference only (no backward).

    Examples
    --------
    >>> y, expert_idx, row_idx = npu_anywhere.npu_moe_gating_top_k_softmax(torch.rand(3, 3), None, k=2)
    """
    return gating_top_k_softmax_op(x, finished, k)


def npu_moe_gating_top_k_softmax_v2(x, *, k=1, finished=None, renorm=0, output_softmax=False):
    """Softmax/top-k gating with a renorm switch (``renorm=1``: top-k of ``x``, then softmax).

    Formula::

        renorm=0:  p = softmax(x, -1);  y, expert_idx = topk(p, k)
        renorm=1:  t, expert_idx = topk(x, k);  y = softmax(t, -1)
        expert_idx[finished] = E

    Returns
    -------
    (y, expert_idx, softmax_result) : ``y`` in ``x``'s dtype, ``expert_idx`` int32 (both
    ``x``'s shape with the last dim ``k``); ``softmax_result`` is ``p`` in float32 with ``x``'s
    shape when ``renorm == 0 and output_softmax``, else an empty ``(0,)`` float32 tensor.

    Constraints
    -----------
    ``x`` 2-D or 3-D float16/bfloat16/float32; ``0 < k <= min(E, 1024)``; ``finished`` bool of
    shape ``x.shape[:-1]``; ``renorm`` 0 or 1.  Strict mode: A2 and A3.

    Notes
    -----
    Follows op-plugin's golden (test_npu_moe_gating_top_k_softmax_v2.py): ranking on the float32
    softmax, one rounding at the end.  op-plugin's meta function gives a 3-D input's
    ``softmax_result`` a 2-D shape (it tests ``x.dim == 3``, a method, not a call); the golden and
    this implementation keep ``x``'s shape.
    """
    return gating_top_k_softmax_v2_op(x, k=k, finished=finished, renorm=renorm,
                                      output_softmax=output_softmax)


TORCH_NPU_FUNCTIONS = {
    OP: npu_moe_gating_top_k_softmax,
    OP_V2: npu_moe_gating_top_k_softmax_v2,
}
