"""mc2_comm family: matmuls fused with a collective over the process group named by ``hcom``
(npu_mm_all_reduce_base, npu_mm_reduce_scatter_base, npu_all_gather_base_mm,
npu_alltoallv_gmm, npu_gmm_alltoallv).

``_comm`` holds the collectives (identity without a group), ``_local`` each rank's float32
matmul; ``npu_anywhere.compat.hccl`` provides the ``hccl`` process-group backend and the
communicator names.
"""

import sys

from ..family import collect

TORCH_NPU_FUNCTIONS, CANN_FUNCTIONS = collect(sys.modules[__name__])
