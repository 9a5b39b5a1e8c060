"""All operator families.  Importing this package registers every op with torch.library.

Each family package (``ops/<family>/``) lists its Python functions in ``TORCH_NPU_FUNCTIONS``
(``torch_npu.<name>``) and ``CANN_FUNCTIONS`` (``cann_ops_transformer.ops.<name>``); every
family package here is imported, so adding one needs no edit in this file.

This package is also the home of the CANN ops-transformer Python API
(``npu_anywhere.ops.apply_rotary_pos_emb``...), which ``cann_ops_transformer.ops`` mirrors.
"""

import importlib
import pkgutil

TORCH_NPU_FUNCTIONS: dict = {}
"""torch_npu-level functions by name (``torch_npu.<name>``)."""

CANN_FUNCTIONS: dict = {}
"""cann_ops_transformer.ops functions by name."""

for _family in sorted(m.name for m in pkgutil.iter_modules(__path__) if m.ispkg):
    _module = importlib.import_module(f"{__name__}.{_family}")
    TORCH_NPU_FUNCTIONS.update(getattr(_module, "TORCH_NPU_FUNCTIONS", {}))
    CANN_FUNCTIONS.update(getattr(_module, "CANN_FUNCTIONS", {}))

# torch.ops.custom.<op> for the ops seed 004 writes as ``custom.<op>(...)``
from .. import custom_namespace as _custom_namespace  # noqa: E402  (needs the ops above)

_custom_namespace.register()

globals().update(CANN_FUNCTIONS)
__all__ = sorted(CANN_FUNCTIONS)
