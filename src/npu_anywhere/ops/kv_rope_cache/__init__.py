"""MLA KV-cache writes fused with RMSNorm and RoPE: npu_kv_rmsnorm_rope_cache (+ _v2,
_v2_functional)."""

import sys

from ..family import collect
from .kv_rmsnorm_rope_cache import (npu_kv_rmsnorm_rope_cache, npu_kv_rmsnorm_rope_cache_v2,
                                    npu_kv_rmsnorm_rope_cache_v2_functional)

TORCH_NPU_FUNCTIONS, CANN_FUNCTIONS = collect(sys.modules[__name__])
