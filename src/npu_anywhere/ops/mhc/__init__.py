"""mHC family (manifold-constrained hyper-connections): npu_mhc_pre (stream mixing into the
layer input and the H_post / H_res projections), npu_mhc_sinkhorn (doubly stochastic H_res) and
npu_mhc_post (residual mixing of the layer output back into the n streams), each with its
public backward op and autograd through it.

``_common`` holds the dtype and shape checks the three share; ``sinkhorn_layout`` the kernel's
flat layout of the saved Sinkhorn intermediates.
"""

import sys

from ..family import collect

TORCH_NPU_FUNCTIONS, CANN_FUNCTIONS = collect(sys.modules[__name__])
