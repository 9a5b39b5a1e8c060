"""The one place that touches ``torch.library``.

An :class:`NpuOp` is defined from its literal schema string and owns, for that op:

* the ``_check`` shared by the dispatcher and the fake kernel (same errors in eager,
  FakeTensor and ``torch.compile``), preceded by the checks its schema implies
  (:mod:`npu_anywhere.arguments`: no ``None`` for a required tensor, written tensors that can
  take the write),
* the provider list (fast providers with support predicates, reference last),
* the fake kernel (default: the reference itself, run on fake tensors),
* autograd (a backward that calls the op's public ``*_backward`` / ``*_grad`` op), or an
  explicit "no backward" error.

Namespaces: torch_npu ops live in ``torch.ops.npu`` and the CANN ops-transformer API in
``torch.ops.cann_ops_transformer`` -- but only when the real packages are absent.  When the
real ``torch-npu`` distribution is installed, everything registers under
``torch.ops.npu_anywhere`` instead, so both can run side by side for golden comparisons and
the real ops are never shadowed.  Helper ops that torch_npu does not have always live in
``npu_anywhere``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

from . import checks, targets
from .arguments import ArgumentSpec
from .dispatch import Provider, ProviderList

INTERNAL_NS = "npu_anywhere"


def _distribution_present(*names: str) -> bool:
    for name in names:
        try:
            importlib.metadata.distribution(name)
            return True
        except importlib.metadata.PackageNotFoundError:
            continue
    return False


def _real_cann_ops_transformer_present() -> bool:
    if _distribution_present("cann-ops-transformer", "cann_ops_transformer"):
        return True
    # Without importing it: a top-level module of that name found on sys.path is the real one
    # (our shim is only reachable after npu_anywhere.install()).
    try:
        return importlib.util.find_spec("cann_ops_transformer") is not None
    except (ImportError, ValueError):
        return False


REAL_TORCH_NPU = _distribution_present("torch-npu", "torch_npu")
REAL_CANN_OPS_TRANSFORMER = _real_cann_ops_transformer_present()
TORCH_NPU_NS = INTERNAL_NS if REAL_TORCH_NPU else "npu"
CANN_NS = INTERNAL_NS if REAL_CANN_OPS_TRANSFORMER else "cann_ops_transformer"

_libraries: dict[str, torch.library.Library] = {}


def _library(ns: str) -> torch.library.Library:
    if ns not in _libraries:
        _libraries[ns] = torch.library.Library(ns, "FRAGMENT")
    return _libraries[ns]


REGISTRY: dict[str, "NpuOp"] = {}
"""Every op we define, by its public name (``npu_rotary_mul``, ``apply_rotary_pos_emb``...).

An overload other than ``default`` is an op of its own, keyed ``<name>.<overload>``
(``npu_grouped_matmul.List``, ``npu_fusion_attention_v3.out``); :func:`default_ops` lists the
``default`` overloads only, and :attr:`NpuOp.overloads` an op's others."""


def split_name(head: str) -> tuple[str, str]:
    """``"op.List"`` -> ``("op", "List")``; ``"op"`` -> ``("op", "default")``."""
    name, _, overload = head.strip().partition(".")
    return name, overload or "default"


def default_ops() -> dict[str, "NpuOp"]:
    """The registry without the named overloads: one entry per op name."""
    return {key: op for key, op in REGISTRY.items() if op.overload_name == "default"}


@dataclass
class OpInfo:
    """What ``npu-anywhere ops`` and the generic tests need to know about an op."""
    api: str                       # "torch_npu", "cann_ops_transformer" or "internal"
    public: bool = True            # exposed as npu_anywhere.<name> / torch_npu.<name>
    backward_of: Optional[str] = None
    notes: list[str] = field(default_factory=list)


class NpuOp:
    """One operator: schema, check, providers, fake kernel and autograd.

    Parameters
    ----------
    schema : str
        The literal schema, e.g. ``"npu_rotary_mul(Tensor self, ...) -> Tensor"``.
    namespace : str
        ``library.TORCH_NPU_NS``, ``library.CANN_NS`` or ``library.INTERNAL_NS``.
    check : callable
        ``check(*args, **kwargs)`` with the schema's signature; raises through
        :mod:`npu_anywhere.checks`.  Runs before every provider and in the fake kernel.
    reference : callable or None
        The readable implementation with the schema's signature.  ``None`` for ops whose
        semantics are given by a CompositeImplicitAutograd ``composite`` instead.
    fake : callable, optional
        Output metadata only; defaults to running ``reference`` on fake tensors.
    metadata_check : bool
        True when ``check`` looks only at metadata (shapes, dtypes, devices, contiguity, the
        non-tensor arguments, the strict-mode product), never at tensor values or strides.  Eager calls then skip
        the check for a signature that already passed it: decode loops repeat one signature
        and the check would otherwise cost as much as the arithmetic.
    composite : callable, optional
        A CompositeImplicitAutograd implementation (used for ops that only wrap others, such
        as a public in-place op returning its mutated inputs).
    random : bool
        True for ops that draw from torch's random generator (dropout, seed draws): the op is
        tagged ``torch.Tag.nondeterministic_seeded``, so that graph passes never merge two
        identical calls (their masks differ) or reorder them against other random ops.

    A schema whose name carries an overload (``"npu_grouped_matmul.List(...) -> Tensor[]"``)
    defines that overload of the op: it has its own check, reference or composite, fake kernel,
    autograd and providers, and is registered as ``REGISTRY["npu_grouped_matmul.List"]``.
    :meth:`define_overload` is the usual spelling; :func:`define_out` builds ``.out`` overloads.
    """

    def __init__(self, schema: str, *, namespace: str, check: Callable[..., None],
                 reference: Callable[..., Any] | None = None,
                 fake: Callable[..., Any] | None = None,
                 composite: Callable[..., Any] | None = None,
                 metadata_check: bool = False,
                 random: bool = False,
                 info: OpInfo):
        self.schema = schema
        head = schema.split("(", 1)[0].strip()
        self.name, self.overload_name = split_name(head)
        # What torch.library calls this overload ("op" or "op.List") and the REGISTRY key.
        self.key = head if self.overload_name != "default" else self.name
        self.namespace = namespace
        self.qualname = f"{namespace}::{self.key}"
        self.check = check
        self.info = info
        self.autograd = "none"
        self._validated: set | None = set() if metadata_check else None
        if self.key in REGISTRY:
            raise ValueError(f"op {self.key} is defined twice")
        lib = _library(namespace)
        lib.define(schema, tags=(torch.Tag.nondeterministic_seeded,) if random else ())
        self.packet = getattr(getattr(torch.ops, namespace), self.name)
        self.overload = getattr(self.packet, self.overload_name)
        self.arguments = ArgumentSpec(self.name, self.overload._schema)
        arguments = self.arguments
        self._composite = composite
        if composite is not None:
            self.providers = None
            self.has_fake = True   # decomposes into ops that have fake kernels
            lib.impl(self.key, composite, "CompositeImplicitAutograd")
        else:
            if reference is None:
                raise ValueError(f"{self.name}: an op needs a reference or a composite")
            self.providers = ProviderList(self.key, reference)
            self.has_fake = True
            lib.impl(self.key, self._kernel, "CompositeExplicitAutograd")
            fake_fn = fake if fake is not None else reference

            def fake_kernel(*args, **kwargs):
                arguments.check_required(args, kwargs)
                check(*args, **kwargs)
                arguments.check_targets(args, kwargs)
                return fake_fn(*args, **kwargs)

            torch.library.register_fake(self.qualname, fake_kernel, lib=lib)
        REGISTRY[self.key] = self

    @property
    def overloads(self) -> dict[str, "NpuOp"]:
        """The op's overloads other than ``default``, by overload name (``{"List": ...}``)."""
        return {op.overload_name: op for op in REGISTRY.values()
                if op.name == self.name and op.namespace == self.namespace
                and op.overload_name != "default"}

    def define_overload(self, schema: str, *, check: Callable[..., None],
                        reference: Callable[..., Any] | None = None,
                        fake: Callable[..., Any] | None = None,
                        composite: Callable[..., Any] | None = None,
                        metadata_check: bool = False,
                        info: OpInfo | None = None) -> "NpuOp":
        """Define another overload of this op, e.g. ``"npu_grouped_matmul.List(...) -> ..."``.

        The overload lives in this op's namespace, with its own schema and ``check``, and a
        ``reference`` (then a fake kernel and providers of its own) or a ``composite`` (usually
        a conversion of its arguments followed by a call of this op, which shares this op's
        providers, fake kernel and autograd that way).  ``info`` defaults to this op's API.
        """
        name, overload = split_name(schema.split("(", 1)[0])
        if name != self.name or overload == "default":
            raise ValueError(f"{self.name}: an overload's schema must be named "
                             f"{self.name}.<overload>, not {name}.{overload}")
        return NpuOp(schema, namespace=self.namespace, check=check, reference=reference,
                     fake=fake, composite=composite, metadata_check=metadata_check,
                     info=info if info is not None else OpInfo(api=self.info.api,
                                                              public=self.info.public))

    # -- dispatch ------------------------------------------------------------------------

    def _kernel(self, *args: Any, **kwargs: Any) -> Any:
        arguments = self.arguments
        validated = self._validated
        # The op's own check comes before the targets' (a malformed call gets the specific
        # error); both come before any provider writes.
        if validated is None:
            arguments.check_required(args, kwargs)
            self.check(*args, **kwargs)
        else:
            signature = _signature(args, kwargs)
            if signature not in validated:
                arguments.check_required(args, kwargs)
                self.check(*args, **kwargs)
                if len(validated) < _MAX_SIGNATURES:
                    validated.add(signature)
        if arguments.written:
            # Inference-ness and overlap are not part of the signature: checked every call.
            arguments.check_targets(args, kwargs)
        return self.providers.select(*args, **kwargs).fn(*args, **kwargs)

    def add_provider(self, name: str, fn: Callable[..., Any],
                     supports: Callable[..., Optional[str]] | None = None) -> None:
        """Register a fast provider, tried before the reference (in registration order)."""
        self.providers.add(Provider(name, fn, supports))

    # -- autograd ------------------------------------------------------------------------

    def set_autograd(self, *, setup_context: Callable[[Any, tuple, Any], None],
                     backward: Callable[..., tuple]) -> None:
        """Differentiate through ``backward(ctx, *grads) -> grads per schema argument``.

        Calls that need no gradient skip ``torch.autograd.Function`` entirely (it costs tens
        of microseconds, which matters for decode-sized calls).
        """
        overload = self.overload
        arguments = overload._schema.arguments
        normalize = _normalizer(arguments)
        kwonly = [a.name for a in arguments if a.kwarg_only]
        n_positional = len(arguments) - len(kwonly)

        class Function(torch.autograd.Function):
            @staticmethod
            def forward(*flat):
                kw = dict(zip(kwonly, flat[n_positional:]))
                with torch._C._AutoDispatchBelowAutograd():
                    return overload(*flat[:n_positional], **kw)

            @staticmethod
            def setup_context(ctx, inputs, output):
                setup_context(ctx, inputs, output)

            @staticmethod
            def backward(ctx, *grads):
                return backward(ctx, *grads)

        Function.__name__ = Function.__qualname__ = f"{self.key.replace('.', '_')}_autograd"

        def autograd_kernel(*args, **kwargs):
            if torch.is_grad_enabled() and _needs_grad(args, kwargs):
                return Function.apply(*normalize(args, kwargs))
            with torch._C._AutoDispatchBelowAutograd():
                return overload(*args, **kwargs)

        _library(self.namespace).impl(self.key, autograd_kernel, "Autograd")
        self.autograd = "yes"

    def forbid_autograd(self, reason: str, *, public_name: str | None = None) -> None:
        """The op has no backward: requesting a gradient raises at the call.

        ``public_name`` names the op in the message when this is the internal op behind a
        public wrapper.
        """
        overload = self.overload
        name = public_name or self.name
        self.arguments.op = name     # argument errors name the op the user called

        def autograd_kernel(*args, **kwargs):
            if torch.is_grad_enabled() and _needs_grad(args, kwargs):
                checks.expect(False, name, "inputs", f"that do not require grad ({reason})",
                              "an input with requires_grad=True", RuntimeError)
            with torch._C._AutoDispatchBelowAutograd():
                return overload(*args, **kwargs)

        _library(self.namespace).impl(self.key, autograd_kernel, "Autograd")
        self.autograd = "no (raises)"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the op, as ``torch.ops.<ns>.<name>(...)`` would.

        A plain eager call -- arguments that bind to the schema with exactly the types it names
        (ordinary tensors needing no gradient, ``int`` for ``int``...), no torch function or
        dispatch mode, no functorch transform, no profiler, not traced by ``torch.compile`` --
        runs the op's kernel (check, then provider) directly.  That is exactly what the
        dispatcher would run for it, minus two trips between C++ and Python, which cost as much
        as the arithmetic of a decode-sized call.  Every other call goes through the
        dispatcher, which converts and rejects arguments as the schema says.  One difference
        from ``torch.ops``: ``None`` for a non-optional ``bool`` raises here (torch's parser
        would take it as False).
        """
        # Dynamo folds this to True and must trace nothing else; in eager it is always False,
        # even while another thread compiles (unlike torch.compiler.is_compiling()).
        if torch.compiler.is_dynamo_compiling():
            return self.overload(*args, **kwargs)
        if _plain_context() and self.arguments.fast(args, kwargs, torch.is_grad_enabled()):
            # A composite op's dispatcher entry is its Python function.
            run = self._kernel if self._composite is None else self._composite
            if torch._C._len_torch_function_stack():
                # As under the dispatcher: a mode does not see the op's inner torch calls.
                with torch._C.DisableTorchFunction():
                    return run(*args, **kwargs)
            return run(*args, **kwargs)
        self.arguments.reject_none_bools(args, kwargs)
        return self.overload(*args, **kwargs)

    def __repr__(self) -> str:
        return f"NpuOp({self.qualname})"


def define_inplace(public_schema: str, internal_schema: str, *, check: Callable[..., None],
                   reference: Callable[..., None], no_grad: str,
                   namespace: str = TORCH_NPU_NS) -> tuple["NpuOp", "NpuOp"]:
    """An in-place public op that writes into its first argument and returns it.

    Two ops, the shape that lets ``torch.compile`` functionalize it (an op returning an alias
    of a mutated input cannot be auto-functionalized): a void op in :data:`INTERNAL_NS`
    (``internal_schema``, ``-> ()``) that checks and runs ``reference``, and the public op
    (``public_schema``, ``Tensor(a!) self ... -> Tensor(a!)``) as a CompositeImplicitAutograd
    wrapper calling it and returning ``self``.  Neither has a backward (``no_grad`` says why).
    Returns ``(internal, public)``.
    """
    public_name = public_schema.split("(", 1)[0].strip()
    internal = NpuOp(internal_schema, namespace=INTERNAL_NS, check=check, reference=reference,
                     fake=_no_output, metadata_check=True,
                     info=OpInfo(api="internal", public=False))
    internal.forbid_autograd(no_grad, public_name=public_name)

    def composite(*args: Any, **kwargs: Any) -> Any:
        internal(*args, **kwargs)
        return args[0]

    public = NpuOp(public_schema, namespace=namespace, check=check, composite=composite,
                   info=OpInfo(api="torch_npu"))
    public.autograd = "no (raises)"
    return internal, public


def define_out(public_schema: str, *, check: Callable[..., None],
               reference: Callable[..., None], no_grad: str,
               namespace: str = TORCH_NPU_NS,
               info: OpInfo | None = None) -> tuple["NpuOp", "NpuOp"]:
    """An overload that writes its results into tensors the caller passes (``op.out``).

    ``public_schema`` is the overload's literal schema, its written arguments marked
    (``..., *, Tensor(a!) out_x, Tensor(b!) out_y) -> (Tensor(a!), Tensor(b!))``); each return
    is the argument with its alias set.  Two ops, as :func:`define_inplace` builds them and for
    the same reason (``torch.compile`` cannot auto-functionalize an op returning aliases of its
    mutated inputs): a void op ``INTERNAL_NS::_<name>_<overload>`` with the same arguments and
    ``-> ()``, which runs ``check`` (before any write, as do the written-target checks) and
    ``reference`` (which writes into the given tensors and returns nothing), and the public
    overload, a CompositeImplicitAutograd wrapper calling it and returning the written tensors.
    No backward (``no_grad`` says why).  Returns ``(internal, public)``.
    """
    head, arguments = public_schema.split("(", 1)
    name, overload = split_name(head)
    arguments = arguments.rsplit(") ->", 1)[0]
    parsed = torch._C.parse_schema(f"{namespace}::{public_schema}")
    params = list(parsed.arguments)
    returned = []
    for ret in parsed.returns:
        alias = ret.alias_info
        index = next((i for i, a in enumerate(params) if alias is not None
                      and a.alias_info is not None and a.alias_info.is_write
                      and a.alias_info.before_set == alias.before_set), None)
        if index is None:
            raise ValueError(f"{head}: return {ret} is not one of the written arguments")
        returned.append((index, params[index].name))
    internal = NpuOp(f"_{name}_{overload}({arguments}) -> ()", namespace=INTERNAL_NS,
                     check=check, reference=reference, fake=_no_output, metadata_check=True,
                     info=OpInfo(api="internal", public=False))
    # Errors name the op the user called (its arguments' checks name it by its base name).
    internal.forbid_autograd(no_grad, public_name=name)

    def composite(*args: Any, **kwargs: Any) -> Any:
        internal(*args, **kwargs)
        outs = tuple(args[i] if i < len(args) else kwargs[n] for i, n in returned)
        return outs[0] if len(outs) == 1 else outs

    public = NpuOp(public_schema, namespace=namespace, check=check, composite=composite,
                   info=info if info is not None else OpInfo(api="torch_npu"))
    public.autograd = "no (raises)"
    return internal, public


def _no_output(*args: Any, **kwargs: Any) -> None:
    return None


_MAX_SIGNATURES = 4096


def _describe(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return (value.shape, value.dtype, value.device, value.is_contiguous())
    if isinstance(value, (list, tuple)):
        return tuple(_describe(v) for v in value)
    # The type too: 285 == 285.0 and 1 == True, but a check may accept one and not the other.
    return (value.__class__, value)


def _signature(args: tuple, kwargs: dict) -> tuple:
    """What a metadata-only check depends on (the strict product included)."""
    described = tuple(_describe(a) for a in args)
    if kwargs:
        described += tuple((k, _describe(v)) for k, v in sorted(kwargs.items()))
    return (targets.current(), described)


TRANSPARENT_FUNCTION_MODES: set[type] = set()
"""TorchFunctionMode classes that leave our ops' arguments alone (the shim's device mode):
eager calls made under them may still skip the dispatcher."""


def _plain_context() -> bool:
    """True when no mode, transform or profiler would see a call through the dispatcher."""
    # Not torch.compiler.is_compiling(): that flag is process-wide, so it would send every
    # thread's calls down the slow path while one thread compiles.  Dynamo and AOT tracing
    # both show up here anyway (is_dynamo_compiling is folded to True; AOT traces under
    # dispatch modes).
    if (torch.compiler.is_dynamo_compiling() or torch._C._len_torch_dispatch_stack()
            or torch._C._functorch.peek_interpreter_stack() is not None
            or torch._C._autograd._profiler_enabled()):
        return False
    modes = torch._C._len_torch_function_stack()
    return not modes or all(type(torch._C._get_function_stack_at(i)) in
                            TRANSPARENT_FUNCTION_MODES for i in range(modes))


def _plain_eager(args: tuple, kwargs: dict) -> bool:
    """True when the dispatcher would do nothing for this call but run our kernel
    (the context and the tensors; ``ArgumentSpec.fast`` also checks the other values)."""
    if not _plain_context():
        return False
    grad = torch.is_grad_enabled()
    for value in (*args, *kwargs.values()):
        if isinstance(value, (list, tuple)):
            if not all(_plain_value(v, grad) for v in value):
                return False
        elif not _plain_value(value, grad):
            return False
    return True


def _plain_value(value: Any, grad: bool) -> bool:
    """Not a tensor, or a plain ``torch.Tensor`` (no subclass, not meta) needing no gradient."""
    if not isinstance(value, torch.Tensor):
        return True
    return (type(value) is torch.Tensor and not value.is_meta
            and not (grad and value.requires_grad))


def _needs_grad(args: tuple, kwargs: dict) -> bool:
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            if value.requires_grad:
                return True
        elif isinstance(value, (list, tuple)):
            if any(isinstance(v, torch.Tensor) and v.requires_grad for v in value):
                return True
    return False


def _normalizer(arguments) -> Callable[[tuple, dict], tuple]:
    """Return a function mapping (args, kwargs) to the full positional tuple of the schema."""
    names = [a.name for a in arguments]
    defaults = [a.default_value if a.has_default_value() else _MISSING for a in arguments]

    def normalize(args: tuple, kwargs: dict) -> tuple:
        full = list(args) + defaults[len(args):]
        for key, value in kwargs.items():
            full[names.index(key)] = value
        return tuple(full)

    return normalize


_MISSING = object()
