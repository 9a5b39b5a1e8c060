"""Op database entries of the sparse lightning-indexer KL-loss backward."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry

_OP = "npu_sparse_lightning_indexer_grad_kl_loss"


def _t(*shape, dtype=torch.float16, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed),
                       dtype=torch.float64).to(dtype)


def _indices():
    # rows 0..3 of S1 = 4 against S2 = 6 see 3..6 keys; -1 pads, 5 in row 0 lies past the diagonal
    return torch.tensor([[0, 2, 5], [3, 1, -1], [4, -1, -1], [5, 2, 0]],
                        dtype=torch.int32).reshape(1, 4, 1, 3)


def _sparse_kl_args(**kw):
    stats = (torch.zeros(1, 1, 4, 2), torch.full((1, 1, 4, 2), 2.0))
    tensors = (_t(1, 4, 2, 16, seed=41), _t(1, 6, 1, 16, seed=42), _t(1, 4, 3, 16, seed=43),
               _t(1, 6, 1, 16, seed=44), _t(1, 4, 3, dtype=torch.float32, seed=45), _indices())
    return tensors + stats + (0.25,), dict(kw)


def _sparse_kl() -> None:
    e = _entry(_OP)
    e.samples += [Sample("bsnd_fp16_rope_sinks", lambda: _sparse_kl_args(
        query_rope=_t(1, 4, 2, 8, seed=46), key_rope=_t(1, 6, 1, 8, seed=47),
        sinks=_t(2, dtype=torch.float32, seed=48)))]
    e.errors += [
        ErrorSample("sparse_mode", lambda: _sparse_kl_args(sparse_mode=0), ValueError,
                    f"{_OP}: expected sparse_mode 3"),
        ErrorSample("indices_dtype", lambda: (_sparse_kl_args()[0][:5]
                                              + (_indices().long(),)
                                              + _sparse_kl_args()[0][6:], {}), TypeError,
                    f"{_OP}: expected sparse_indices dtype"),
    ]


_sparse_kl()
