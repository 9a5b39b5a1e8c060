"""All operator families.  Importing this package registers every op with torch.library.

Also the home of the CANN ops-transformer Python API (``cann_ops_transformer.ops`` mirrors it):
``npu_anywhere.ops.apply_rotary_pos_emb`` etc.
"""

from . import posembedding

TORCH_NPU_FUNCTIONS = {**posembedding.TORCH_NPU_FUNCTIONS}
"""torch_npu-level functions by name (``torch_npu.<name>``)."""

CANN_FUNCTIONS = {**posembedding.CANN_FUNCTIONS}
"""cann_ops_transformer.ops functions by name."""

globals().update(CANN_FUNCTIONS)
__all__ = sorted(CANN_FUNCTIONS)
