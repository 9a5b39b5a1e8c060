"""The paged-cache layout helpers (npu_anywhere.ops.cache.paged) against the documented layout::

    NZ row width ld = 32 // element size (16 for 2-byte dtypes, 32 for 1-byte, 8 for 4-byte)
    token s, row c:  nz[s // bs][c][s % bs][:] = nd[s // bs][s % bs].reshape(-1)[c*ld:(c+1)*ld]
    per-head NZ:     nz5[s // bs][h][c][s % bs][:] = nd[s // bs][s % bs][h][c*ld:(c+1)*ld]
"""

from __future__ import annotations

import pytest
import torch

from npu_anywhere.ops.cache.paged import (bitwise, nd_to_nz, nz_last_dim, nz_to_nd, write_nd,
                                          write_nz)


@pytest.mark.parametrize("dtype,ld", [(torch.float16, 16), (torch.bfloat16, 16), (torch.int8, 32),
                                      (torch.uint8, 32), (torch.float8_e4m3fn, 32),
                                      (torch.float32, 8), (torch.int32, 8), (torch.uint16, 16)],
                         ids=str)
def test_nz_last_dim(dtype, ld):
    assert nz_last_dim(dtype) == ld


@pytest.mark.parametrize("dtype", [torch.float16, torch.int8, torch.float32], ids=str)
def test_nd_to_nz_follows_the_layout(dtype):
    ld = nz_last_dim(dtype)
    nb, bs, n, d = 2, 3, 2, 2 * ld
    nd = torch.arange(nb * bs * n * d).remainder(100).to(dtype).reshape(nb, bs, n, d)
    nz, nz5 = nd_to_nz(nd), nd_to_nz(nd, per_head=True)
    assert nz.shape == (nb, n * d // ld, bs, ld) and nz5.shape == (nb, n, d // ld, bs, ld)
    for s in range(nb * bs):
        token = nd[s // bs][s % bs].reshape(-1)
        for c in range(n * d // ld):
            assert torch.equal(nz[s // bs][c][s % bs], token[c * ld:(c + 1) * ld])
        for h in range(n):
            for c in range(d // ld):
                assert torch.equal(nz5[s // bs][h][c][s % bs],
                                   nd[s // bs][s % bs][h][c * ld:(c + 1) * ld])
    assert torch.equal(nz_to_nd(nz, n), nd) and torch.equal(nz_to_nd(nz5, n), nd)


def test_nd_to_nz_rejects_unaligned_heads():
    with pytest.raises(ValueError, match="nd_to_nz: expected head_size a multiple of 16"):
        nd_to_nz(torch.zeros(1, 2, 2, 8, dtype=torch.float16))


def test_writes_are_bitwise_and_touch_only_named_slots():
    nan_with_payload = torch.tensor([0x7E01], dtype=torch.int16).view(torch.float16)
    rows = torch.cat([nan_with_payload, torch.tensor([-0.0], dtype=torch.float16)]).repeat(16)
    rows = rows.reshape(1, 2, 16).expand(2, 2, 16).contiguous()
    nd = torch.zeros(2, 2, 2, 16, dtype=torch.float16)
    write_nd(nd, torch.tensor([3, 0]), rows)
    assert torch.equal(bitwise(nd[1, 1]), bitwise(rows[0]))
    assert torch.equal(bitwise(nd[0, 0]), bitwise(rows[1]))
    assert torch.equal(bitwise(nd[0, 1]), torch.zeros(2, 16, dtype=torch.int16))
    nz = torch.zeros(2, 2, 2, 16, dtype=torch.float16)
    write_nz(nz, torch.tensor([2]), rows[:1])
    assert torch.equal(bitwise(nz[1, :, 0]), bitwise(rows[0]))
    assert torch.equal(bitwise(nz[0]), torch.zeros(2, 2, 16, dtype=torch.int16))
