"""Grouped matmul family: npu_grouped_matmul (MoE expert GEMMs).

``grouping`` reads ``group_list`` (cumsum, sizes, or [index, size] rows), ``problem`` checks a
call's metadata and names its form, ``compute`` runs the per-group matmuls.
"""

import sys

from ..family import collect

TORCH_NPU_FUNCTIONS, CANN_FUNCTIONS = collect(sys.modules[__name__])
