"""Loss family: fused cross-entropy (npu_cross_entropy_loss and its backward), TF-style
softmax cross-entropy with logits, and the vocab-parallel cross-entropy pieces
(npu_fused_linear_online_max_sum, npu_fused_cross_entropy_loss_with_max_sum and their backward).

``_common`` holds the dtype rules and checks the loss ops share.
"""

import sys

from ..family import collect

TORCH_NPU_FUNCTIONS, CANN_FUNCTIONS = collect(sys.modules[__name__])
