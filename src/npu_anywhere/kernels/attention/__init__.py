"""Fast solvers of :class:`~npu_anywhere.ops.attention.problem.AttentionProblem`.

``paged_attention`` (paged KV: decode and chunked prefill, reading cache blocks in place) and
``dense_attention`` (dense KV: PyTorch's fused flash kernel where the problem maps onto it, the
tiled online-softmax engine otherwise).  Each takes the problem and returns ``(out, lse)`` in
float32 (float64 for float64 queries); each has a ``supports(problem) -> Optional[str]``
attribute that returns the reason when it declines.  The attention ops try them in that order
(``ops/attention/core.py``) before their reference.
"""

from .dense import dense_attention
from .paged import paged_attention

__all__ = ["dense_attention", "paged_attention"]
