"""Benchmark cases for npu_fused_floyd_attention and npu_block_sparse_attention.

Presets:

* Floyd ``m64_n256_k256``: B 1, H 2, M 64, N = K = 256, D 64, a random 20 % key mask
  (``[B, 1, M, 1, K]``), float16 and bfloat16, scale ``D ** -0.5``.
* block sparse ``s2048``: BNSD, B 1, N 8, S 2048, D 128, float16, ``block_shape [128, 128]``,
  25 % of the blocks selected (every query block keeps its first key block), inner_precise 0.

Contenders:

* ``naive``: the doc formula as users hand-write it, float32 throughout -- every score
  materialized by einsum, ``softmax``, the value products (block sparse: the block mask expanded
  to a dense ``[S, S]`` mask);
* ``npu_anywhere``: the op as called (its fast provider: ``strided_bmm`` / ``flat_gather``);
* ``reference``: the op's row-blocked reference (the oracle the providers are tested against).

``fwd+bwd`` cases time the forward and one backward of a ones-like gradient.  ``python -m
npu_anywhere.bench.training_attention_more [filter] [repeats]`` prints median times and the
peak extra resident memory of each contender, each in a fresh process.
"""

from __future__ import annotations

import torch

from ..ops.training_attention.block_sparse_attention import npu_block_sparse_attention
from ..ops.training_attention.floyd_attention import npu_fused_floyd_attention
from .registry import Case, register, with_reference

OPS = ("npu_fused_floyd_attention", "npu_block_sparse_attention")

# -- Floyd -------------------------------------------------------------------------------------

FLOYD = {"m64_n256_k256": (1, 2, 64, 256, 256, 64)}


def floyd_naive(q, k_ij, v_ij, k_jk, v_jk, mask):
    f = [t.float() for t in (q, k_ij, v_ij, k_jk, v_jk)]
    s = (torch.einsum("bhmnd,bhmkd->bhmnk", f[0], f[1])
         + torch.einsum("bhmnd,bhknd->bhmnk", f[0], f[3])) * q.shape[-1] ** -0.5
    p = torch.softmax(s.masked_fill(mask, float("-inf")), -1)
    out = torch.einsum("bhmnk,bhmkd->bhmnd", p, f[2]) + torch.einsum("bhmnk,bhknd->bhmnd", p, f[4])
    return out.to(q.dtype)


def floyd_ours(q, k_ij, v_ij, k_jk, v_jk, mask):
    return npu_fused_floyd_attention(q, k_ij, v_ij, k_jk, v_jk, atten_mask=mask,
                                     scale_value=q.shape[-1] ** -0.5)[2]


def _floyd_case(preset: str, dtype: torch.dtype, backward: bool) -> Case:
    b, h, m, n, k, d = FLOYD[preset]

    def make(device):
        gen = torch.Generator().manual_seed(0)
        mk = lambda *s: torch.randn(*s, generator=gen).to(device=device, dtype=dtype)  # noqa
        mask = (torch.rand(b, 1, m, 1, k, generator=gen) < 0.2)
        mask[..., 0] = False
        return (mk(b, h, m, n, d), mk(b, h, m, k, d), mk(b, h, m, k, d), mk(b, h, k, n, d),
                mk(b, h, k, n, d), mask.to(device))

    contenders = {"naive": floyd_naive, "npu_anywhere": floyd_ours,
                  "reference": with_reference(floyd_ours)}
    if backward:
        contenders = {name: with_backward(fn, 5) for name, fn in contenders.items()}
    size = torch.finfo(dtype).bits // 8
    return Case(name=f"npu_fused_floyd_attention {preset} {_kind(backward)} {str(dtype)[6:]}",
                op=OPS[0], preset=preset, dtype=dtype, make_inputs=make,
                bytes_moved=size * b * h * d * (3 * m * n + 2 * m * k + 2 * k * n),
                contenders=contenders, check="reference",
                tolerance={"atol": 3e-2, "rtol": 3e-2})


# -- block sparse ------------------------------------------------------------------------------

BSA = {"s2048": (1, 8, 2048, 128, 128)}
DENSITY = 0.25


def bsa_naive(q, k, v, mask):
    s = q.shape[2]
    block = s // mask.shape[2]
    keep = mask.bool().repeat_interleave(block, 2).repeat_interleave(block, 3)[..., :s, :s]
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * q.shape[-1] ** -0.5
    p = torch.softmax(scores.masked_fill(~keep, float("-inf")), -1)
    return torch.matmul(p, v.float()).to(q.dtype)


def bsa_ours(q, k, v, mask):
    block = q.shape[2] // mask.shape[2]
    return npu_block_sparse_attention(q, k, v, mask, [block, block], q_input_layout="BNSD",
                                      kv_input_layout="BNSD", num_key_value_heads=k.shape[1],
                                      scale_value=q.shape[-1] ** -0.5, inner_precise=0)[0]


def _bsa_case(preset: str, dtype: torch.dtype, backward: bool) -> Case:
    b, heads, s, d, block = BSA[preset]

    def make(device):
        gen = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(b, heads, s, d, generator=gen).to(device=device, dtype=dtype)
                   for _ in range(3))
        nb = -(-s // block)
        mask = torch.rand(b, heads, nb, nb, generator=gen) < DENSITY
        mask[..., 0] = True                  # every query row sees at least one block
        return q, k, v, mask.to(device=device, dtype=torch.int8)

    contenders = {"naive": bsa_naive, "npu_anywhere": bsa_ours,
                  "reference": with_reference(bsa_ours)}
    if backward:
        contenders = {name: with_backward(fn, 3) for name, fn in contenders.items()}
    size = torch.finfo(dtype).bits // 8
    return Case(name=f"npu_block_sparse_attention {preset} {_kind(backward)} {str(dtype)[6:]}",
                op=OPS[1], preset=preset, dtype=dtype, make_inputs=make,
                bytes_moved=4 * size * b * heads * s * d, contenders=contenders,
                check="reference", tolerance={"atol": 1e-2, "rtol": 1e-2})


# -- shared ------------------------------------------------------------------------------------

def _kind(backward: bool) -> str:
    return "fwd+bwd" if backward else "fwd"


def with_backward(fn, n_grad: int):
    """``fn``'s forward and the backward of ``sum(out)`` in its first ``n_grad`` inputs."""
    def run(*inputs):
        leaves = [t.detach().requires_grad_() for t in inputs[:n_grad]]
        out = fn(*leaves, *inputs[n_grad:])
        grads = torch.autograd.grad(out, leaves, torch.ones_like(out))
        return (out.detach(), *grads)
    run.__name__ = f"{getattr(fn, '__name__', 'fn')}_fwd_bwd"
    return run


for _backward in (False, True):
    for _preset in FLOYD:
        for _dtype in (torch.float16, torch.bfloat16):
            register(_floyd_case(_preset, _dtype, _backward))
    for _preset in BSA:
        register(_bsa_case(_preset, torch.float16, _backward))


# -- a quick side-by-side measurement ----------------------------------------------------------

def measure(filter_text: str = "", repeats: int = 3) -> list[dict]:
    """:func:`.training_attention.measure` over this module's cases."""
    from .training_attention import measure as measure_cases
    return measure_cases(filter_text, repeats, ops=tuple(OPS))


if __name__ == "__main__":
    import sys
    measure(sys.argv[1] if len(sys.argv) > 1 else "",
            int(sys.argv[2]) if len(sys.argv) > 2 else 3)
