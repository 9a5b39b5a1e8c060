"""The float64 goldens of this directory (``golden.py``, made importable here) and the fixture that
runs a test on each attention provider."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(params=["reference", "attention-fast"])
def each_provider(request):
    """Run a test on the reference and on the fast kernels (which fall back to the reference for
    the problems they decline); a file opts in with ``pytest.mark.usefixtures``."""
    import npu_anywhere as na
    with na.use_providers(request.param):
        yield request.param
