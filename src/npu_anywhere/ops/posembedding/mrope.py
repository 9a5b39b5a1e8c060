"""torch_npu.npu_mrope: RoPE / multimodal M-RoPE from a precomputed cos|sin cache.

Formula (seed 004 and op-plugin's torch_npu-npu_mrope.md)::

    cos_sin = cos_sin_cache[positions]            rows are [cos | sin], each rotary_dim/2 wide
    cos, sin = cos_sin.chunk(2, dim=-1)
    M-RoPE (positions of shape (m, T), m = len(mrope_section) = 3 or 4):
      cache_mode 'default':    cos = cat(cos[i, :, section i] for each section i)
      cache_mode 'interleave': cos = cos[0] with cos[..., 1:3*s1:3] from row 1 and
                               cos[..., 2:3*s1:3] from row 2 (s1 = mrope_section[1]); sin alike
    per head, on the first rotary_dim features (the rest pass through):
      half:        x1, x2 = chunk(x_rot, 2);          out = cat(x1*cos - x2*sin, x2*cos + x1*sin)
      interleave:  x1, x2 = x_rot[::2], x_rot[1::2];  out = stack(x1*cos - x2*sin,
                                                                   x2*cos + x1*sin).flatten()
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...dtypes import FLOATING, FLOATING_OR_DOUBLE
from ...kernels import compiled
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from .rotation import prepare, rope

OP = "npu_mrope"
SCHEMA = ("npu_mrope(Tensor positions, Tensor query, Tensor key, Tensor cos_sin_cache, "
          "int head_size, *, int[]? mrope_section=None, str? rotary_mode='half', "
          "str? cache_mode='default') -> (Tensor, Tensor)")

# vllm-ascend passes "interleaved"; the doc page spells it both ways.
_ROTARY_MODES = {"half": "half", "interleave": "interleave", "interleaved": "interleave"}
_CACHE_MODES = ("default", "interleave")
_DOC_SECTIONS = ([16, 24, 24], [24, 20, 20], [8, 12, 12], [16, 16, 16, 16])
_SUPPORTED = frozenset({Product.A2, Product.A3})


def _is_mrope(mrope_section) -> bool:
    return mrope_section is not None and any(s != 0 for s in mrope_section)


def check_mrope(positions, query, key, cos_sin_cache, head_size, *, mrope_section=None,
                rotary_mode="half", cache_mode="default"):
    op = OP
    rotary_mode = "half" if rotary_mode is None else rotary_mode
    cache_mode = "default" if cache_mode is None else cache_mode
    checks.expect_one_of(rotary_mode, tuple(_ROTARY_MODES), op, "rotary_mode")
    checks.expect_one_of(cache_mode, _CACHE_MODES, op, "cache_mode")
    checks.expect_dtype(positions, (torch.int32, torch.int64), op, "positions")
    allowed = FLOATING if targets.current() is not None else FLOATING_OR_DOUBLE
    named = {"query": query, "key": key, "cos_sin_cache": cos_sin_cache}
    for name, t in named.items():
        checks.expect_dtype(t, allowed, op, name)
    checks.expect_same_dtype(named, op)
    checks.expect_same_device({"positions": positions, **named}, op)
    for name, t in named.items():
        checks.expect_dim(t, 2, op, name)
    rotary_dim = cos_sin_cache.shape[1]
    multiple = 16 if query.dtype in (torch.float32, torch.float64) else 32
    checks.expect(head_size > 0 and head_size % multiple == 0, op, "head_size",
                  lambda: f"a positive multiple of {multiple} for {query.dtype}", head_size,
                  ValueError)
    checks.expect(rotary_dim % multiple == 0 and 0 < rotary_dim <= head_size, op,
                  "cos_sin_cache", lambda: f"a last dim (rotary_dim) that is a positive multiple "
                  f"of {multiple} for {query.dtype} and <= head_size ({head_size})", rotary_dim,
                  ValueError)
    tokens = query.shape[0]
    for name, t in (("query", query), ("key", key)):
        checks.expect(t.shape[1] % head_size == 0, op, name,
                      lambda: f"a last dim that is a multiple of head_size ({head_size})",
                      lambda t=t: tuple(t.shape), ValueError)
    checks.expect(key.shape[0] == tokens, op, "key",
                  lambda: f"{tokens} rows (num_tokens of query)", lambda: tuple(key.shape))
    if _is_mrope(mrope_section):
        sections = list(mrope_section)
        checks.expect(len(sections) in (3, 4), op, "mrope_section", "3 or 4 sections", sections,
                      ValueError)
        checks.expect(all(s >= 0 for s in sections) and sum(sections) * 2 == rotary_dim, op,
                      "mrope_section", lambda: f"non-negative sections summing to rotary_dim/2 "
                      f"({rotary_dim // 2})", sections, ValueError)
        checks.expect(positions.dim() == 2 and positions.shape[0] == len(sections), op,
                      "positions", lambda: f"shape ({len(sections)}, num_tokens) in M-RoPE mode",
                      lambda: tuple(positions.shape), ValueError)
        if cache_mode == "interleave":
            checks.expect(len(sections) == 3, op, "cache_mode",
                          "'default' with a 4-section mrope_section", repr(cache_mode),
                          ValueError)
    else:
        checks.expect(positions.dim() == 1, op, "positions",
                      "a 1-D tensor (num_tokens) in RoPE mode (mrope_section None or zeros)",
                      lambda: tuple(positions.shape), ValueError)
    checks.expect(positions.shape[-1] == tokens, op, "positions",
                  lambda: f"num_tokens ({tokens}) positions per row", lambda: tuple(positions.shape))
    product = targets.expect_supported(op, _SUPPORTED)
    if product is not None and _is_mrope(mrope_section):
        checks.expect(list(mrope_section) in [list(s) for s in _DOC_SECTIONS], op,
                      "mrope_section", lambda: f"one of the documented {list(_DOC_SECTIONS)} on "
                      f"{product.value}", list(mrope_section), ValueError)


def _check_positions_in_range(positions, max_seq_len):
    """A value check, so eager-only: the NPU reports out-of-range positions as an error."""
    if positions.numel() == 0:
        return
    low, high = int(positions.min()), int(positions.max())
    checks.expect(low >= 0 and high < max_seq_len, OP, "positions",
                  f"values in [0, {max_seq_len}) (rows of cos_sin_cache)",
                  f"values in [{low}, {high}]", IndexError)


def select_cos_sin(positions, cos_sin_cache, mrope_section, cache_mode):
    """The per-token (cos, sin), each (num_tokens, rotary_dim/2), of RoPE or M-RoPE."""
    rows = cos_sin_cache.index_select(0, positions.reshape(-1).long())
    cos, sin = rows.reshape(*positions.shape, cos_sin_cache.shape[-1]).chunk(2, dim=-1)
    if not _is_mrope(mrope_section):
        return cos, sin
    sections = list(mrope_section)
    if cache_mode == "default":
        # section i of the rotary half takes its angles from position row i
        cos = torch.cat([part[i] for i, part in enumerate(cos.split(sections, dim=-1))], -1)
        sin = torch.cat([part[i] for i, part in enumerate(sin.split(sections, dim=-1))], -1)
        return cos, sin
    # interleave: row 0 everywhere, except every third frequency from rows 1 and 2 (the doc
    # bounds both strided ranges by 3 * mrope_section[1], clipped to rotary_dim/2 as a slice is)
    stop = 3 * sections[1]
    picks = torch.zeros(cos.shape[-1], dtype=torch.long, device=cos.device)
    picks[1:stop:3] = 1
    picks[2:stop:3] = 2
    index = picks.expand(1, cos.shape[1], -1)
    return cos.gather(0, index)[0], sin.gather(0, index)[0]


def _rotate_heads(x, cos, sin, head_size, mode):
    """Apply the rotation to the first rotary_dim features of every head of x (T, H*head)."""
    tokens, rotary_dim = x.shape[0], cos.shape[-1] * 2
    heads = x.reshape(tokens, x.shape[1] // head_size, head_size)
    if mode == "half":
        cos_full, sin_full = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
    else:
        cos_full, sin_full = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
    c, s = prepare(cos_full[:, None, :], sin_full[:, None, :], mode, x.dtype)
    rotated = rope(heads[..., :rotary_dim], c, s, mode)
    if rotary_dim < head_size:
        rotated = torch.cat((rotated, heads[..., rotary_dim:]), -1)
    # A fresh contiguous output whatever x's strides (elementwise ops would keep a transposed
    # x's layout), as the NPU allocates it and as the fake kernel describes it.
    return rotated.reshape(x.shape).contiguous()


def mrope_reference(positions, query, key, cos_sin_cache, head_size, *, mrope_section=None,
                    rotary_mode="half", cache_mode="default"):
    mode = _ROTARY_MODES["half" if rotary_mode is None else rotary_mode]
    _check_positions_in_range(positions, cos_sin_cache.shape[0])
    cos, sin = select_cos_sin(positions, cos_sin_cache, mrope_section,
                              "default" if cache_mode is None else cache_mode)
    return (_rotate_heads(query, cos, sin, head_size, mode),
            _rotate_heads(key, cos, sin, head_size, mode))


def _mrope_fake(positions, query, key, cos_sin_cache, head_size, *, mrope_section=None,
                rotary_mode="half", cache_mode="default"):
    # The reference reads position values (range check), which fake tensors do not have.
    return (query.new_empty(query.shape), key.new_empty(key.shape))


mrope_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_mrope, reference=mrope_reference,
                 fake=_mrope_fake, metadata_check=True, info=OpInfo(api="torch_npu"))
mrope_op.forbid_autograd("npu_mrope has no backward on the NPU (op-plugin lists none)")


def _mrope_key(positions, query, key, cos_sin_cache, head_size, *, mrope_section=None,
               rotary_mode="half", cache_mode="default"):
    return (query.dtype, query.device.type, positions.dim(), rotary_mode, cache_mode,
            None if mrope_section is None else tuple(mrope_section))


def _compiled_body(positions, query, key, cos_sin_cache, head_size, *, mrope_section=None,
                   rotary_mode="half", cache_mode="default"):
    cos, sin = select_cos_sin(positions, cos_sin_cache, mrope_section,
                              "default" if cache_mode is None else cache_mode)
    mode = _ROTARY_MODES["half" if rotary_mode is None else rotary_mode]
    return (_rotate_heads(query, cos, sin, head_size, mode),
            _rotate_heads(key, cos, sin, head_size, mode))


def _compiled_mrope(positions, query, key, cos_sin_cache, head_size, **kwargs):
    # the range check reads values, so it stays outside the compiled region
    _check_positions_in_range(positions, cos_sin_cache.shape[0])
    return _compiled_provider.run(positions, query, key, cos_sin_cache, head_size, **kwargs)


_compiled_provider = compiled.CompiledProvider(_compiled_body, _mrope_key)
mrope_op.add_provider(compiled.CompiledProvider.name, _compiled_mrope,
                      _compiled_provider.supports)


def npu_mrope(positions, query, key, cos_sin_cache, head_size, *, mrope_section=None,
              rotary_mode="half", cache_mode="default"):
    """RoPE (1-D positions) or multimodal M-RoPE (2-D positions) from a cos|sin cache.

    Formula (op-plugin's torch_npu-npu_mrope.md)::

        cos, sin = cos_sin_cache[positions].chunk(2, dim=-1)
        M-RoPE, cache_mode 'default':    section i of cos/sin comes from positions[i]
        M-RoPE, cache_mode 'interleave': cos = cos[0]; cos[..., 1:3*s1:3] = cos[1, ...];
                                         cos[..., 2:3*s1:3] = cos[2, ...]   (s1 = mrope_section[1])
        per head, on x_rot = x[..., :rotary_dim] (x[..., rotary_dim:] passes through):
        half:        x1, x2 = chunk(x_rot, 2);  out = cat(x1*cos - x2*sin, x2*cos + x1*sin)
        interleave:  x1, x2 = x_rot[..., ::2], x_rot[..., 1::2];
                     out = stack(x1*cos - x2*sin, x2*cos + x1*sin, -1).flatten(-2)

    Parameters
    ----------
    positions : Tensor
        int32/int64; (num_tokens,) in RoPE mode, (3 or 4, num_tokens) in M-RoPE mode.  Values
        must lie in [0, max_seq_len) (IndexError otherwise, as the NPU reports out-of-range).
    query, key : Tensor
        (num_tokens, num_heads * head_size), float16/bfloat16/float32 (float64 outside strict
        mode), same dtype as cos_sin_cache.
    cos_sin_cache : Tensor
        (max_seq_len, rotary_dim); each row is [cos | sin].
    head_size : int
        Multiple of 32 (float16/bfloat16) or 16 (float32).
    mrope_section : list of int, optional
        None or zeros: RoPE mode.  Otherwise 3 or 4 sections summing to rotary_dim/2.
    rotary_mode : {'half', 'interleave'}
        'interleaved' (vllm-ascend's spelling) is accepted as 'interleave'.
    cache_mode : {'default', 'interleave'}
        How the sections' cos/sin are combined in M-RoPE mode; 'interleave' needs 3 sections.
        Ignored in RoPE mode (the doc lists only 'default' there, but op-plugin's own test
        passes 'interleave' with 1-D positions and expects the plain RoPE result).

    Returns
    -------
    (query_out, key_out) : new tensors of query's/key's shape and dtype, computed in float32
    and rounded once.

    Constraints
    -----------
    rotary_dim <= head_size, rotary_dim a multiple of 32 (16 for float32).  Strict mode (A2/A3):
    mrope_section one of the documented [16, 24, 24], [24, 20, 20], [8, 12, 12],
    [16, 16, 16, 16].

    Notes
    -----
    The 'interleave' cache mode bounds the row-2 range by mrope_section[1] too, exactly as the
    doc's formula (and op-plugin's golden) writes it; Qwen3-VL's reference uses mrope_section[2]
    there, which agrees whenever the two sections are equal (as in every documented example).
    No backward.
    """
    return mrope_op(positions, query, key, cos_sin_cache, head_size,
                    mrope_section=mrope_section, rotary_mode=rotary_mode,
                    cache_mode=cache_mode)


TORCH_NPU_FUNCTIONS = {"npu_mrope": npu_mrope}
