"""KV-cache and scatter family: paged KV-cache writes, vLLM advance_step, scatter updates."""

import sys

from ..family import collect
from .advance_step import npu_advance_step_flashattn
from .quant_scatter import npu_quant_scatter, npu_quant_scatter_
from .scatter import npu_scatter
from .scatter_nd_update import npu_scatter_nd_update, npu_scatter_nd_update_
from .scatter_pa_kv_cache import npu_scatter_pa_kv_cache, npu_scatter_pa_kv_cache_functional
from .scatter_update import scatter_update, scatter_update_

TORCH_NPU_FUNCTIONS, CANN_FUNCTIONS = collect(sys.modules[__name__])
