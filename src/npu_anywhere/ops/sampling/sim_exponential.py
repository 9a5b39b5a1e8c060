"""torch_npu.npu_sim_exponential_: fill a tensor in place with exponential random numbers.

Formula (seed 004; op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_sim_exponential_.md)::

    self = -ln(1 - u) / lambd,   u ~ Uniform(0, 1]

op-plugin's op_plugin/ops/opapi/SimExponentialNpuOpApi.cpp decides the edges: ``lambd > 0``
is required (its message says "expects lambd > 0.0") and an infinite ``lambd`` zero-fills
``self`` without drawing.  The NPU's stream (aclnnSimThreadExponential's Philox seed and
offset) is not public: here ``1 - u`` is drawn with ``torch.rand`` (uniform on [0, 1)) from
the given generator, or torch's default generator of ``self``'s device, in float32, and the
result is rounded once to ``self``'s dtype.  Same distribution, a different stream; seeding
the generator repeats the numbers.
"""

from __future__ import annotations

import math

import torch

from ... import checks, targets
from ...library import INTERNAL_NS, TORCH_NPU_NS, NpuOp, OpInfo
from ...params import accept_alias
from ...targets import Product

OP = "npu_sim_exponential_"
SCHEMA = ("npu_sim_exponential_(Tensor(a!) self, float lambd=1, *, Generator? generator=None) "
          "-> Tensor(a!)")
INTERNAL_OP = "_npu_sim_exponential_inplace"
INTERNAL_SCHEMA = ("_npu_sim_exponential_inplace(Tensor(a!) self, float lambd=1, *, "
                   "Generator? generator=None) -> ()")

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ASCEND_950})
_MAX_DIMS = 8


def check_sim_exponential(self, lambd=1.0, *, generator=None) -> None:
    targets.expect_supported(OP, _SUPPORTED)
    checks.expect_dtype(self, _DTYPES, OP, "self")
    checks.expect(self.dim() <= _MAX_DIMS, OP, "self", f"at most {_MAX_DIMS} dims",
                  lambda: f"shape {tuple(self.shape)}", ValueError)
    # An expanded view (elements sharing memory) is left to the written-target check that
    # follows, which names that fault.
    overlapping = not self.is_contiguous() and torch._debug_has_internal_overlap(self) == 1
    checks.expect(self.is_contiguous() or overlapping, OP, "self", "a contiguous tensor",
                  lambda: f"strides {tuple(self.stride())} for shape {tuple(self.shape)}",
                  RuntimeError)
    checks.expect(lambd > 0.0, OP, "lambd",
                  "> 0.0 (torch_npu: npu_sim_exponential_ expects lambd > 0.0)",
                  lambda: f"lambd={lambd}", ValueError)
    if generator is not None:
        checks.expect(generator.device.type == self.device.type, OP, "generator",
                      lambda: f"a generator of self's device type ({self.device.type})",
                      lambda: f"one of {generator.device}", RuntimeError)


def sim_exponential_inplace_reference(self, lambd=1.0, *, generator=None) -> None:
    if self.numel() == 0:
        return
    if math.isinf(lambd):
        self.zero_()
        return
    one_minus_u = torch.rand(self.shape, dtype=torch.float32, device=self.device,
                             generator=generator)
    self.copy_(torch.log(one_minus_u).div_(-lambd))


def _no_output(*args, **kwargs):
    return None


_internal_op = NpuOp(INTERNAL_SCHEMA, namespace=INTERNAL_NS, check=check_sim_exponential,
                     reference=sim_exponential_inplace_reference, fake=_no_output, random=True,
                     info=OpInfo(api="internal", public=False))
_internal_op.forbid_autograd("it fills self with random numbers; torch_npu defines no "
                             "backward", public_name=OP)


def _composite(self, lambd=1.0, *, generator=None):
    _internal_op(self, lambd, generator=generator)
    return self


sim_exponential_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_sim_exponential,
                           composite=_composite, random=True, info=OpInfo(api="torch_npu"))
sim_exponential_op.autograd = "no (raises)"


def npu_sim_exponential_(input=None, lambd=1, *, generator=None, **kwargs):
    """Fill ``input`` in place with exponential random numbers of rate ``lambd``; return it.

    Formula (seed 004)::

        input = -ln(1 - u) / lambd,   u ~ Uniform(0, 1]

    Parameters
    ----------
    input : Tensor
        Contiguous, 0-D to 8-D, float32, float16 or bfloat16 (``self=`` also accepted, the
        schema's name).  Its values are overwritten.
    lambd : float
        The rate, ``> 0`` (``inf`` fills zeros, as op-plugin does).  Mean ``1 / lambd``.
    generator : torch.Generator, optional
        Drawn from instead of the default generator of ``input``'s device
        (``torch.Generator(device="npu")`` under the shim is the local device's).

    Returns
    -------
    Tensor
        ``input`` itself.  A call that raises leaves it untouched.

    Notes
    -----
    Matches the NPU in distribution, not in its random stream (op-plugin's own test is a KS
    test against ``Tensor.exponential_``).  ``1 - u`` comes from ``torch.rand`` in float32, so
    it can be 0 with probability 2**-24 per element and give ``inf``, as the formula does at
    ``u = 1``.  No backward.  Under ``torch.compile`` pass no ``generator`` (Dynamo cannot put
    a Generator object into a graph); the default generator works.  Strict mode: A2, A3, 950.

    Examples
    --------
    >>> g = torch.Generator().manual_seed(0)
    >>> x = npu_anywhere.npu_sim_exponential_(torch.empty(100, 400), lambd=2.0, generator=g)
    >>> bool(x.min() > 0)
    True
    """
    if kwargs:
        input = accept_alias(OP, "input", input, "self", kwargs)
    return sim_exponential_op(input, lambd, generator=generator)


TORCH_NPU_FUNCTIONS = {OP: npu_sim_exponential_}
