"""Op database entries of the sampling family: npu_top_k_top_p, npu_top_k_top_p_sample and
npu_sim_exponential_."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry

_I32 = torch.int32


def _logits(b, v, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(b, v, generator=gen) * 2).to(dtype)


def _top_k_top_p() -> None:
    e = _entry("npu_top_k_top_p")
    e.samples += [
        Sample("k_and_p_fp32", lambda: ((_logits(4, 19), torch.tensor([0.9, 0.5, 0.1, 0.7]),
                                         torch.tensor([3, 19, 1, 0], dtype=_I32)), {})),
        Sample("p_only_bf16", lambda: ((_logits(3, 11, torch.bfloat16),
                                        torch.tensor([0.3, 0.8, 1.0], dtype=torch.bfloat16)),
                                       {})),
        Sample("k_only_fp16", lambda: ((_logits(2, 9, torch.float16),),
                                       dict(k=torch.tensor([2, 5], dtype=_I32)))),
    ]
    e.errors += [
        ErrorSample("neither", lambda: ((_logits(2, 5),), {}), ValueError,
                    "npu_top_k_top_p: expected p and k not both None"),
        ErrorSample("p_dtype", lambda: ((_logits(2, 5), torch.rand(2).half()), {}), TypeError,
                    "npu_top_k_top_p: expected p the same dtype as logits"),
        ErrorSample("k_dtype", lambda: ((_logits(2, 5), None, torch.ones(2, dtype=torch.int64)),
                                        {}), TypeError, "npu_top_k_top_p: expected k dtype in"),
        ErrorSample("k_rows", lambda: ((_logits(2, 5), None, torch.ones(3, dtype=_I32)), {}),
                    RuntimeError, "npu_top_k_top_p: expected k a 1-D tensor"),
        ErrorSample("logits_3d", lambda: ((torch.randn(2, 2, 5), torch.rand(2)), {}),
                    ValueError, "npu_top_k_top_p: expected logits a 2-D tensor"),
    ]


def _sim_exponential() -> None:
    # Random draws differ between the eager and the compiled call that the generic tests
    # compare bit for bit, so the samples are inputs whose results are deterministic: an
    # infinite rate (op-plugin zero-fills), a rate so large that every float16 result rounds
    # to 0 (the draw still runs), and an empty tensor.
    e = _entry("npu_sim_exponential_")
    e.samples += [
        Sample("inf_lambd_fp32", lambda: ((torch.ones(3, 5), float("inf")), {})),
        Sample("huge_lambd_fp16", lambda: ((torch.ones(2, 3, 4, dtype=torch.float16), 1e30),
                                           {})),
        Sample("empty_bf16", lambda: ((torch.ones(0, 4, dtype=torch.bfloat16),), {})),
    ]
    e.errors += [
        ErrorSample("lambd_zero", lambda: ((torch.zeros(4), 0.0), {}), ValueError,
                    "npu_sim_exponential_: expected lambd > 0.0"),
        ErrorSample("int_dtype", lambda: ((torch.zeros(4, dtype=torch.int32),), {}),
                    TypeError, "npu_sim_exponential_: expected self dtype in"),
        ErrorSample("non_contiguous", lambda: ((torch.zeros(4, 6).t(),), {}), RuntimeError,
                    "npu_sim_exponential_: expected self a contiguous tensor"),
        ErrorSample("nine_dims", lambda: ((torch.zeros([1] * 9),), {}), ValueError,
                    "npu_sim_exponential_: expected self at most 8 dims"),
    ]


_top_k_top_p()
_sim_exponential()


def _top_k_top_p_sample() -> None:
    # Deterministic modes only ('None', 'qSample'): the generic tests compare eager and
    # compiled results bit for bit; multinomial draws are tested in tests/ops/sampling.
    k = torch.tensor([2, 0, 7, 2000], dtype=_I32)

    def q(rows, vocab):
        return torch.rand(rows, vocab, generator=torch.Generator().manual_seed(9)) + 0.01

    e = _entry("npu_top_k_top_p_sample")
    e.samples += [
        Sample("argmax_min_p_logits_fp32", lambda: (
            (_logits(4, 13), k, torch.tensor([0.9, 0.5, 1.0, 0.0])),
            dict(min_ps=torch.tensor([0.1, 0.0, 1.0, 0.3]), is_need_logits=True))),
        Sample("q_sample_bf16", lambda: (
            (_logits(4, 13, torch.bfloat16), k, torch.tensor([0.7, 0.9, 1.0, 0.4],
                                                               dtype=torch.bfloat16), q(4, 13)),
            dict(is_need_logits=True))),
        Sample("q_sample_probs_fp16", lambda: (
            (torch.softmax(_logits(4, 13), -1).half(), k,
             torch.tensor([0.8, 1.0, 0.3, 0.6], dtype=torch.float16), q(4, 13)),
            dict(input_is_logits=False, ks_max=5))),
    ]
    args = (torch.randn(3, 5), torch.ones(3, dtype=_I32), torch.ones(3))
    e.errors += [
        ErrorSample("top_k_dtype", lambda: ((args[0], torch.ones(3, dtype=torch.int64),
                                             args[2]), {}), TypeError,
                    "npu_top_k_top_p_sample: expected top_k dtype in"),
        ErrorSample("top_p_dtype", lambda: ((args[0], args[1], args[2].half()), {}), TypeError,
                    "npu_top_k_top_p_sample: expected top_p the same dtype as logits"),
        ErrorSample("q_shape", lambda: (args + (torch.ones(3, 4),), {}), RuntimeError,
                    "npu_top_k_top_p_sample: expected q logits' shape"),
        ErrorSample("post_sample", lambda: (args, dict(post_sample="greedy")), ValueError,
                    "npu_top_k_top_p_sample: expected post_sample one of"),
        ErrorSample("min_ps_rows", lambda: (args, dict(min_ps=torch.ones(2))), RuntimeError,
                    "npu_top_k_top_p_sample: expected min_ps a 1-D tensor"),
    ]


_top_k_top_p_sample()
