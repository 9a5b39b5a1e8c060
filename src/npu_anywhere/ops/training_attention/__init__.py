"""Training attention family: npu_fusion_attention (+ its grad) and the v3 variant.

``fa_problem`` parses the layouts, lengths and constraints shared by the forward and the
grad; ``fa_masks`` builds the sparse-mode masks and the dropout keep-mask, ``fa_pse`` reads
the pse forms (dense, alibi-compressed, TND); ``fa_math`` holds the row-blocked float32
reference and the SDPA flash fast path, ``fa_tiled`` the online-softmax tiles that take every
other call.
"""

import sys

from ..family import collect

TORCH_NPU_FUNCTIONS, CANN_FUNCTIONS = collect(sys.modules[__name__])
