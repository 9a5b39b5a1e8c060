"""Quantization family: the shared quantization core (:mod:`.core`) and the basic quant ops.

Other families' quantizing ops (add_rms_norm_quant, swiglu_quant, KV-cache quant writes...) build
on :mod:`npu_anywhere.ops.quant.core`.
"""

import sys

from ..family import collect
from . import core
from .anti_quant import npu_anti_quant
from .convert_weight_to_int4pack import npu_convert_weight_to_int4pack
from .dynamic_quant import npu_dynamic_quant
from .dynamic_quant_asymmetric import npu_dynamic_quant_asymmetric
from .quantize import npu_quantize
from .trans_quant_param import npu_trans_quant_param

TORCH_NPU_FUNCTIONS, CANN_FUNCTIONS = collect(sys.modules[__name__])
