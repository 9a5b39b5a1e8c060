"""Op database entries of the v3 graph-capture helpers (``_npu_fusion_attention_v3_infer_output``,
``_npu_fusion_attention_grad_v3_infer_output`` and the two workspace queries)."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry


def _r(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _qkv_bsh():
    return _r(2, 3, 16), _r(2, 5, 8, seed=1), _r(2, 5, 12, seed=2)


def _tnd(**over):
    def make():
        q, k = _r(5, 2, 4), _r(7, 1, 4, seed=1)
        kwargs = dict(actual_seq_qlen=torch.tensor([2, 5]), actual_seq_kvlen=torch.tensor([3, 7]))
        kwargs.update(over)
        return (q, k, k.clone(), 2, "TND"), kwargs
    return make


def _tnd_grad(**over):
    def make():
        (q, k, v, n, layout), kwargs = _tnd()()
        out, smax, ssum, _, seed, offset = torch.ops.npu.npu_fusion_attention_v3(q, k, v, n,
                                                                                 layout, **kwargs)
        kwargs.update(softmax_max=smax, softmax_sum=ssum, attention_in=out, seed=seed,
                      offset=offset)
        kwargs.update(over)
        return (q, k, v, _r(5, 2, 4, seed=3), n, layout), kwargs
    return make


e = entry("_npu_fusion_attention_v3_infer_output")
e.samples += [Sample("bsh_gqa", lambda: ((*_qkv_bsh(), 4, "BSH"), {})),
              Sample("bnsd_fp16", lambda: ((_r(1, 2, 3, 4, dtype=torch.float16),
                                            _r(1, 1, 5, 4, dtype=torch.float16),
                                            _r(1, 1, 5, 6, dtype=torch.float16), 2, "BNSD"), {}))]
e.errors += [ErrorSample("layout", lambda: ((*_qkv_bsh(), 4, "NTD"), {}), ValueError,
                         "input_layout"),
             ErrorSample("dims", lambda: ((*_qkv_bsh(), 4, "BNSD"), {}), RuntimeError, "query")]

e = entry("_npu_fusion_attention_grad_v3_infer_output")
e.samples += [Sample("plain", lambda: ((*_qkv_bsh(),), {})),
              Sample("pse_sink", lambda: ((*_qkv_bsh(),), dict(pse=_r(2, 4, 3, 5),
                                                               sink=_r(4, dtype=torch.float16))))]
e.errors += [ErrorSample("no_query", lambda: ((None, *_qkv_bsh()[1:]), {}), TypeError,
                         "expected query a Tensor")]

e = entry("_npu_fusion_attention_v3_get_max_workspace")
e.samples += [Sample("tnd", _tnd())]
e.errors += [ErrorSample("bsh", lambda: ((*_qkv_bsh()[:2], _r(2, 5, 8), 4, "BSH"), {}),
                         ValueError, "input_layout")]

e = entry("_npu_fusion_attention_grad_v3_get_max_workspace")
e.samples += [Sample("tnd", _tnd_grad())]
e.errors += [ErrorSample("keep_prob", _tnd_grad(keep_prob=0.0), ValueError, "keep_prob")]
