"""Attention family: fused inference attention (FIA v1/v2), prompt and incremental flash attention,
and the attention-update (LSE merge) ops.

``problem`` holds the one internal form every inference-attention op normalizes into
(:class:`~npu_anywhere.ops.attention.problem.AttentionProblem`); ``core`` is the float32 reference
that solves it.  Fast providers in ``npu_anywhere.kernels.attention`` solve the same form.
"""

import sys

from ..family import collect

TORCH_NPU_FUNCTIONS, CANN_FUNCTIONS = collect(sys.modules[__name__])
