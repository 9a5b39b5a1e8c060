"""torch_npu.npu_format_cast / npu_format_cast_ / get_npu_format.

NPU tensors carry a storage format (ND, NCHW, FRACTAL_NZ = 29, ...) that changes how bytes are
laid out on the device but never the values a user reads.  Off the NPU every tensor is stored
plainly, so a format cast is the identity on values; we record the requested format on the
tensor so that ``get_npu_format`` answers what the NPU would, and code that branches on it
(e.g. "is this weight already NZ?") behaves the same.

These are Python/C++ helpers in torch_npu (op-plugin's yaml has no schema for them), so they
are plain functions here, not torch.library ops.
"""

from __future__ import annotations

import torch

from ... import checks

ACL_FORMAT_ND = 2
ACL_FORMAT_NCHW = 0
ACL_FORMAT_NCDHW = 30
ACL_FORMAT_FRACTAL_NZ = 29
_ATTRIBUTE = "_npu_anywhere_format"


def _default_format(t: torch.Tensor) -> int:
    """torch_npu's base format for a new tensor: NCHW for 4-D, NCDHW for 5-D, else ND."""
    return {4: ACL_FORMAT_NCHW, 5: ACL_FORMAT_NCDHW}.get(t.dim(), ACL_FORMAT_ND)


def get_npu_format(tensor: torch.Tensor) -> int:
    """The (emulated) storage format of ``tensor``: the last format cast to, else the default."""
    checks.expect(isinstance(tensor, torch.Tensor), "get_npu_format", "tensor", "a Tensor",
                  type(tensor).__name__, TypeError)
    return getattr(tensor, _ATTRIBUTE, _default_format(tensor))


def _format_code(op: str, acl_format) -> int:
    if isinstance(acl_format, torch.Tensor):
        return get_npu_format(acl_format)
    checks.expect(isinstance(acl_format, int) and not isinstance(acl_format, bool), op,
                  "acl_format", "an int format code or a Tensor", type(acl_format).__name__,
                  TypeError)
    checks.expect(acl_format >= 0, op, "acl_format", "a non-negative format code", acl_format,
                  ValueError)
    return acl_format


def npu_format_cast(self, acl_format, customize_dtype=None):
    """Return ``self`` in storage format ``acl_format`` (identity on values).

    Parameters
    ----------
    self : Tensor
    acl_format : int
        ACL format code (2 ND, 0 NCHW, 29 FRACTAL_NZ, ...).
    customize_dtype : optional
        Accepted for signature compatibility; ignored (storage dtype is unchanged here).

    Returns
    -------
    Tensor
        ``self`` itself when it already has that format, otherwise a new tensor object
        sharing ``self``'s storage whose ``get_npu_format`` is ``acl_format``.

    Notes
    -----
    On the NPU a cast to another format copies into a new storage; here the result aliases
    ``self`` (the values are identical, and model-loading code that casts large weights to NZ
    should not double their memory).
    """
    code = _format_code("npu_format_cast", acl_format)
    if get_npu_format(self) == code:
        return self
    result = self.view_as(self)
    setattr(result, _ATTRIBUTE, code)
    return result


def npu_format_cast_(self, src):
    """Set ``self``'s storage format to ``src`` (a format code or a tensor's format); returns
    ``self``."""
    setattr(self, _ATTRIBUTE, _format_code("npu_format_cast_", src))
    return self


TORCH_NPU_FUNCTIONS = {
    "npu_format_cast": npu_format_cast,
    "npu_format_cast_": npu_format_cast_,
    "get_npu_format": get_npu_format,
}
