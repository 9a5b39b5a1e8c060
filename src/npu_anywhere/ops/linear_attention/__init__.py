"""Linear attention family: the Gated DeltaNet (gated delta rule) ops.

``npu_recurrent_gated_delta_rule`` (+ ``_functional``) is the decode step, token by token;
``npu_chunk_gated_delta_rule`` the chunked prefill form of the same recurrence.  ``_gdr`` holds
the shared math (one token step, vectorised over sequences and heads, and the chunk / WY form).
"""

import sys

from ..family import collect

TORCH_NPU_FUNCTIONS, CANN_FUNCTIONS = collect(sys.modules[__name__])
