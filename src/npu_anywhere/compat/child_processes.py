"""The shim in the Python processes a script run by ``npu-anywhere run`` starts.

:func:`enable` puts :mod:`npu_anywhere.compat.child_site` (one ``sitecustomize.py``) first on
``PYTHONPATH`` and sets ``NPU_ANYWHERE_SHIM_CHILDREN=1``, so every descendant interpreter
installs the shim at its first ``import torch_npu``; see that module for how.  The claim-npu
choice travels as ``NPU_ANYWHERE_CLAIM_NPU``, which :func:`npu_anywhere.install` reads.
"""

from __future__ import annotations

import os

SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "child_site")


def enable(claim_npu: bool = False) -> None:
    """Make the processes this process starts from now on get the shim (environment only)."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if SITE_DIR not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([SITE_DIR, *paths])
    os.environ["NPU_ANYWHERE_SHIM_CHILDREN"] = "1"
    if claim_npu:
        os.environ["NPU_ANYWHERE_CLAIM_NPU"] = "1"
