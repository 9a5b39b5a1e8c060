"""Which Ascend SoC the testing helpers pretend to run on.

torch_npu's ``SupportedDevices([...])`` skips a test unless the NPU's SoC name, cut to a short
key, is in the list.  Its cut (torch_npu ``testing/common_utils.py``): the first 10 characters of
``get_device_name(0)``; if those are ``"Ascend910_"`` the first 12 instead; if the name starts
with ``"Ascend950"`` the first 9.  The keys op-plugin's tests use, and the product each names:

================  ============================  =======================
key               full SoC names (examples)     npu_anywhere product
================  ============================  =======================
``Ascend910B``    Ascend910B1 ... Ascend910B4   ``A2``
``Ascend910_93``  Ascend910_9391, _9392, ...    ``A3``
``Ascend950``     Ascend950PR, Ascend950DT      ``950``
``Ascend310P``    Ascend310P1, Ascend310P3      ``310P``
``Ascend910A``    Ascend910A, Ascend910ProA     ``910`` (Atlas training)
================  ============================  =======================

The emulated SoC is, in this order:

1. the SoC of the active strict target (:func:`npu_anywhere.strict` or ``NPU_ANYWHERE_STRICT``):
   it decides which rules the ops enforce, so the skips must agree with it;
2. ``NPU_ANYWHERE_SOC`` (a full name such as ``Ascend910B4`` or a key such as ``Ascend950``);
3. none: npu_anywhere then accepts what every documented product accepts, so no
   ``SupportedDevices`` test is skipped.
"""

from __future__ import annotations

import os

from ... import targets
from ...targets import Product

ENV_SOC = "NPU_ANYWHERE_SOC"

# The SoC name reported for a strict target (one real part number of each line).
DEFAULT_SOC = {
    Product.A2: "Ascend910B4",
    Product.A3: "Ascend910_9391",
    Product.ASCEND_950: "Ascend950PR",
    Product.ATLAS_INFERENCE: "Ascend310P3",
    Product.ATLAS_TRAINING: "Ascend910A",
}

# SoC name prefixes of each product, longest first so that "Ascend910_93" wins over "Ascend910".
_PREFIXES = (
    ("Ascend910_93", Product.A3),
    ("Ascend910B", Product.A2),
    ("Ascend950", Product.ASCEND_950),
    ("Ascend310P", Product.ATLAS_INFERENCE),
    ("Ascend910A", Product.ATLAS_TRAINING),
    ("Ascend910P", Product.ATLAS_TRAINING),
)


def device_key(soc_name: str) -> str:
    """The short key ``SupportedDevices`` compares, cut from a full SoC name like torch_npu."""
    key = soc_name[:10]
    if key == "Ascend910_":
        return soc_name[:12]
    if key.startswith("Ascend950"):
        return soc_name[:9]
    return key


def product_of(soc_name: str) -> Product:
    """The npu_anywhere product a SoC name (full or key) belongs to."""
    for prefix, product in _PREFIXES:
        if soc_name.startswith(prefix):
            return product
    known = ", ".join(prefix for prefix, _ in _PREFIXES)
    raise ValueError(f"{ENV_SOC}: expected a SoC name starting with one of {known}, "
                     f"but got {soc_name!r}")


def emulated_soc() -> str | None:
    """The full SoC name the tests run as, or None when every product is emulated at once."""
    product = targets.current()
    from_env = os.environ.get(ENV_SOC, "").strip() or None
    if product is not None:
        if from_env is not None and product_of(from_env) is not product:
            raise ValueError(f"{ENV_SOC}: expected a SoC of the strict target {product.value}, "
                             f"but got {from_env!r}")
        return from_env or DEFAULT_SOC[product]
    if from_env is not None:
        product_of(from_env)  # reject an unknown name early, with the list of known ones
    return from_env


def env_product() -> Product | None:
    """The product ``NPU_ANYWHERE_SOC`` names (None when unset)."""
    from_env = os.environ.get(ENV_SOC, "").strip()
    return product_of(from_env) if from_env else None
