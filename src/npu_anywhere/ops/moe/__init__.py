"""MoE routing family: gating (softmax top-k), init routing (v1, v2), expert token counts and
finalize routing.

``_routing`` holds the shared index math: the stable sort of flattened expert ids and the
inverse permutation that every routing op builds on.
"""

import sys

from ..family import collect

TORCH_NPU_FUNCTIONS, CANN_FUNCTIONS = collect(sys.modules[__name__])
