"""Optimizer family: single-step Adam updates written into the caller's (var, m, v):
npu_apply_adam (TF ApplyAdam), npu_apply_adam_w (AdamW, with amsgrad / maximize) and
npu_bert_apply_adam (BERT Adam / mBART Adam).

torch_npu defines each as an ``.out`` overload (``var``, ``m``, ``v`` written in place and
returned); the functional overloads raise on the NPU ("not implemented for Tensor"), so only the
``.out`` forms are registered here.  ``_common`` holds the shared checks and the ``out=`` handling.
"""

import sys

from ..family import collect

TORCH_NPU_FUNCTIONS, CANN_FUNCTIONS = collect(sys.modules[__name__])
