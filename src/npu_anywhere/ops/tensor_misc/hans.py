"""torch_npu.npu_hans_encode / npu_hans_decode: lossless compression of float tensors.

What the docs fix (seed 004; op-plugin ``op_plugin_functions.yaml`` schemas
``npu_hans_encode.out`` / ``npu_hans_decode.out``): every element's bytes split into one
"exponent byte" and ``element_size - 1`` mantissa bytes; ``mantissa`` holds the latter
uncompressed (``mantissa.nbytes == input.numel() * (element_size - 1)``); the exponent bytes are
entropy-coded with a 256-bin probability table ``pdf`` (int32 counts, recounted from the input
when ``statistic``) into a fixed-size part ``fixed`` and an overflow part ``var`` (``reshuff``:
everything in ``fixed``); ``npu_hans_decode`` with the same ``pdf`` and ``reshuff`` restores the
input bit for bit.  The NPU's bitstream itself is not documented (ops_catalog: "round-trip
only"), so this module defines its own, and only its own decoder reads it:

* exponent byte: the element's bits rotated left by one (the sign moves to the lowest bit), top
  byte -- for float32 and bfloat16 exactly the 8 exponent bits; the other bytes, little-endian,
  are the mantissa bytes (element-major in ``mantissa``; byte views assume a little-endian
  host, as every CPU and GPU torch runs on here);
* code: a canonical Huffman code (at most 15 bits) built from ``pdf + 1`` (so every byte value
  can be coded, whatever the table says);
* stream (bytes, laid over ``fixed`` then ``var``): a 16-byte header (``b"HANS"``, version,
  dtype, reshuff, numel), one length byte per 64-element block (coded length in bytes, or 255
  for a block kept raw when coding would not shrink it), then the blocks' payloads, each code
  written most significant bit first, bit ``p`` of the stream being bit ``p % 8`` of byte
  ``p // 8``.

The worst case (every block raw) is ``16 + numel / 64 + numel`` bytes, below the doc's bound
``numel + numel / 64 + 8448 * vector cores``, so buffers sized as the doc asks always suffice.
"""

from __future__ import annotations

import functools
import heapq

import torch

from ... import checks, targets
from ...library import define_out
from ...targets import Product

ENCODE = "npu_hans_encode"
DECODE = "npu_hans_decode"
ENCODE_SCHEMA = ("npu_hans_encode.out(Tensor input, bool statistic=False, bool reshuff=False, "
                 "*, Tensor(a!) pdf, Tensor(b!) mantissa, Tensor(c!) fixed, Tensor(d!) var) "
                 "-> (Tensor(a!), Tensor(b!), Tensor(c!), Tensor(d!))")
DECODE_SCHEMA = ("npu_hans_decode.out(Tensor mantissa, Tensor fixed, Tensor var, Tensor pdf, "
                 "bool reshuff=False, *, Tensor(a!) out) -> Tensor(a!)")

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_DTYPE_CODE = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
_BLOCK = 64                 # elements per block (the doc's "numel / 64" of metadata)
_MIN_NUMEL = 32768
_MIN_FIXED_BYTES = 512
_HEADER = 16
_RAW = 255
_MAX_BITS = 15
_MAGIC = b"HANS"
_VERSION = 1
_CHUNK_BLOCKS = 4096        # blocks encoded per pass (bounds the bit-position temporaries)
_SUPPORTED = frozenset({Product.A2, Product.A3})


def worst_case_bytes(numel: int) -> int:
    """The stream's largest size for ``numel`` elements (every block raw)."""
    return _HEADER + numel // _BLOCK + numel


# -- checks -----------------------------------------------------------------------------------

def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _check_numel(op: str, name: str, t: torch.Tensor) -> None:
    n = t.numel()
    checks.expect(n % _BLOCK == 0 and n >= _MIN_NUMEL, op, name,
                  f"a multiple of {_BLOCK} elements, at least {_MIN_NUMEL}",
                  f"{n} elements", ValueError)


def _check_pdf(op: str, pdf: torch.Tensor) -> None:
    checks.expect_dtype(pdf, (torch.int32,), op, "pdf")
    checks.expect(pdf.numel() == 256 and pdf.dim() in (1, 2) and pdf.shape[-1] == 256, op,
                  "pdf", "shape [1, 256] (or [256])", lambda: f"shape {tuple(pdf.shape)}",
                  RuntimeError)


def _check_buffers(op: str, ref_name: str, ref: torch.Tensor, tensors: dict) -> None:
    for name, t in tensors.items():
        checks.expect(t.dtype == ref.dtype, op, name, f"the dtype of {ref_name} "
                      f"({str(ref.dtype)[6:]})", str(t.dtype)[6:], TypeError)
    checks.expect_same_device({ref_name: ref, **tensors}, op)


def _check_mantissa(op: str, mantissa, numel: int, esize: int) -> None:
    want = numel * (esize - 1)
    checks.expect(_nbytes(mantissa) == want, op, "mantissa", f"numel * (element_size - 1) = "
                  f"{want} bytes", lambda: f"{_nbytes(mantissa)} bytes", RuntimeError)


def _check_capacity(op: str, numel: int, fixed, var, reshuff: bool) -> None:
    checks.expect(_nbytes(fixed) >= _MIN_FIXED_BYTES, op, "fixed",
                  f"at least {_MIN_FIXED_BYTES} bytes", lambda: f"{_nbytes(fixed)} bytes",
                  RuntimeError)
    need = worst_case_bytes(numel)
    if reshuff:
        checks.expect(_nbytes(fixed) >= need, op, "fixed", f"at least {need} bytes with "
                      "reshuff (the whole compressed stream)", lambda: f"{_nbytes(fixed)} bytes",
                      RuntimeError)
    else:
        checks.expect(_nbytes(fixed) + _nbytes(var) >= need, op, "fixed and var",
                      f"at least {need} bytes together (the compressed stream's upper bound)",
                      lambda: f"{_nbytes(fixed) + _nbytes(var)} bytes", RuntimeError)


def check_hans_encode(input, statistic=False, reshuff=False, *, pdf, mantissa, fixed, var):
    op = ENCODE
    targets.expect_supported(op, _SUPPORTED)
    checks.expect_dtype(input, _DTYPES, op, "input")
    _check_numel(op, "input", input)
    _check_pdf(op, pdf)
    _check_buffers(op, "input", input, {"mantissa": mantissa, "fixed": fixed, "var": var})
    checks.expect_same_device({"input": input, "pdf": pdf}, op)
    _check_mantissa(op, mantissa, input.numel(), input.element_size())
    _check_capacity(op, input.numel(), fixed, var, reshuff)


def check_hans_decode(mantissa, fixed, var, pdf, reshuff=False, *, out):
    op = DECODE
    targets.expect_supported(op, _SUPPORTED)
    checks.expect_dtype(out, _DTYPES, op, "out")
    _check_numel(op, "out", out)
    _check_pdf(op, pdf)
    _check_buffers(op, "out", out, {"mantissa": mantissa, "fixed": fixed, "var": var})
    checks.expect_same_device({"out": out, "pdf": pdf}, op)
    _check_mantissa(op, mantissa, out.numel(), out.element_size())
    _check_capacity(op, out.numel(), fixed, var, reshuff)


# -- the code ---------------------------------------------------------------------------------

def _code_lengths(weights: list[int]) -> list[int]:
    """Huffman code lengths of 256 symbols, at most ``_MAX_BITS`` (weights flattened until the
    tree is shallow enough)."""
    w = list(weights)
    while True:
        heap = [(w[s], s, (s,)) for s in range(256)]
        heapq.heapify(heap)
        lengths = [0] * 256
        tie = 256
        while len(heap) > 1:
            wa, _, a = heapq.heappop(heap)
            wb, _, b = heapq.heappop(heap)
            for s in a + b:
                lengths[s] += 1
            heapq.heappush(heap, (wa + wb, tie, a + b))
            tie += 1
        if max(lengths) <= _MAX_BITS:
            return lengths
        w = [(x >> 1) + 1 for x in w]


def _canonical(lengths: list[int]) -> list[int]:
    """Canonical codes: by (length, symbol), each the previous plus one, shifted on growth."""
    codes = [0] * 256
    code, prev = 0, 0
    for length, s in sorted((lengths[s], s) for s in range(256)):
        code <<= length - prev
        codes[s] = code
        code += 1
        prev = length
    return codes


def _reverse(code: int, length: int) -> int:
    return int(format(code, f"0{length}b")[::-1], 2) if length else 0


@functools.lru_cache(maxsize=16)
def _code_for(counts: tuple) -> tuple[list[int], list[int]]:
    """(reversed codes, lengths) per byte value for one pdf (cached: decode loops and repeated
    calls with one table rebuild nothing)."""
    lengths = _code_lengths([c + 1 for c in counts])
    codes = _canonical(lengths)
    return [_reverse(c, n) for c, n in zip(codes, lengths)], lengths


def _tables(pdf: torch.Tensor, device):
    """Per byte value: its code bit-reversed (the stream holds codes least significant bit
    first, i.e. the canonical code's first bit at the lowest position) and its length."""
    reversed_codes, lengths = _code_for(tuple(int(v) for v in pdf.reshape(-1).tolist()))
    return (torch.tensor(reversed_codes, dtype=torch.int64, device=device),
            torch.tensor(lengths, dtype=torch.int64, device=device))


@functools.lru_cache(maxsize=16)
def _window_table(counts: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    """(symbol, length) of every ``_MAX_BITS``-bit window read least significant bit first: the
    window's low ``length`` bits are the symbol's reversed code (prefix-free: one match)."""
    reversed_codes, lengths = _code_for(counts)
    symbol = torch.zeros(1 << _MAX_BITS, dtype=torch.int32)
    length = torch.zeros(1 << _MAX_BITS, dtype=torch.int32)
    for s, (rc, n) in enumerate(zip(reversed_codes, lengths)):
        where = rc + (torch.arange(1 << (_MAX_BITS - n)) << n)
        symbol[where] = s
        length[where] = n
    return symbol, length


def _decode_table(pdf: torch.Tensor, device):
    symbol, length = _window_table(tuple(int(v) for v in pdf.reshape(-1).tolist()))
    return symbol.to(device), length.to(device)


# -- element bytes ----------------------------------------------------------------------------

_INT_OF = {4: torch.int32, 2: torch.int16}


def _split(x: torch.Tensor):
    """(exponent bytes int64 [N], mantissa bytes uint8 [N * (esize - 1)]).

    The bits rotated left by one (two's-complement shifts: the sign bit comes back masked to
    one bit), then read as little-endian bytes: the top byte is the exponent byte."""
    esize = x.element_size()
    bits = 8 * esize
    u = x.contiguous().view(_INT_OF[esize]).reshape(-1)
    r = (u << 1) | ((u >> (bits - 1)) & 1)
    as_bytes = r.view(torch.uint8).view(-1, esize)
    return as_bytes[:, esize - 1].to(torch.int64), as_bytes[:, :esize - 1].reshape(-1)


def _join(exponent: torch.Tensor, mantissa: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    esize = torch.empty((), dtype=dtype).element_size()
    bits = 8 * esize
    as_bytes = torch.cat([mantissa.reshape(-1, esize - 1),
                          exponent.to(torch.uint8).unsqueeze(1)], dim=1).contiguous()
    r = as_bytes.view(_INT_OF[esize]).reshape(-1)
    low_bits = (1 << (bits - 1)) - 1
    u = ((r >> 1) & low_bits) | (r << (bits - 1))
    return u.view(dtype)


# -- encode -----------------------------------------------------------------------------------

def _encode_stream(exponent: torch.Tensor, code, length, dtype, reshuff: bool) -> torch.Tensor:
    device = exponent.device
    n = exponent.numel()
    blocks = n // _BLOCK
    sym = exponent.view(blocks, _BLOCK)
    bit_len = length[sym]                                     # [blocks, 64]
    coded_bytes = (bit_len.sum(dim=1) + 7) // 8
    raw = coded_bytes >= _BLOCK
    sizes = torch.where(raw, torch.full_like(coded_bytes, _BLOCK), coded_bytes)
    table = torch.where(raw, torch.full_like(coded_bytes, _RAW), coded_bytes).to(torch.uint8)
    starts = torch.cumsum(sizes, 0) - sizes                   # payload byte offset per block
    # + 2 spare bytes: a code starting in the last byte spills into (zero) bytes past it
    payload = torch.zeros(int(sizes.sum()) + 2, dtype=torch.int64, device=device)
    any_raw = bool(raw.any())
    if not bool(raw.all()):
        rows = torch.nonzero(~raw).reshape(-1) if any_raw else None
        cl, cs, cb = (bit_len, sym, starts) if rows is None else \
            (bit_len[rows], sym[rows], starts[rows])
        first = (torch.cumsum(cl, 1) - cl) + cb.unsqueeze(1) * 8   # each code's first bit
        value = (code[cs] << (first & 7)).reshape(-1)         # at most 15 + 7 bits: 3 bytes
        byte = (first >> 3).reshape(-1)
        # the codes' bits are disjoint, so adding the bytes is OR-ing them
        for k in range(3):
            payload.index_add_(0, byte + k, (value >> (8 * k)) & 0xFF)
    if any_raw:
        rows = torch.nonzero(raw).reshape(-1)
        where = starts[rows].unsqueeze(1) + torch.arange(_BLOCK, device=device)
        payload[where.reshape(-1)] = sym[rows].reshape(-1)
    header = torch.zeros(_HEADER, dtype=torch.uint8, device=device)
    header[:4] = torch.tensor(list(_MAGIC), dtype=torch.uint8)
    header[4] = _VERSION
    header[5] = _DTYPE_CODE[dtype]
    header[6] = int(reshuff)
    header[8:16] = torch.tensor([(n >> (8 * k)) & 0xFF for k in range(8)], dtype=torch.uint8)
    return torch.cat([header, table, payload[:-2].to(torch.uint8)])


def _bytes_of(t: torch.Tensor) -> torch.Tensor:
    """``t``'s elements as flat bytes (a copy when ``t`` is not contiguous)."""
    return t.contiguous().view(torch.uint8).reshape(-1)


def _write_bytes(t: torch.Tensor, data: torch.Tensor) -> None:
    """Write ``data`` over the first bytes of ``t`` (element order), leaving the rest."""
    if data.numel() == 0:
        return
    target = t if t.is_contiguous() else t.contiguous()
    target.view(torch.uint8).reshape(-1)[:data.numel()] = data
    if target is not t:
        t.copy_(target)


def _write_stream(stream: torch.Tensor, fixed: torch.Tensor, var: torch.Tensor) -> None:
    n = min(stream.numel(), _nbytes(fixed))
    _write_bytes(fixed, stream[:n])
    _write_bytes(var, stream[n:])


def hans_encode_reference(input, statistic=False, reshuff=False, *, pdf, mantissa, fixed, var):
    exponent, low = _split(input)
    if statistic:
        counts = torch.bincount(exponent, minlength=256).to(torch.int32)
        pdf.copy_(counts.reshape(pdf.shape))
    code, length = _tables(pdf, input.device)
    _write_bytes(mantissa, low)
    _write_stream(_encode_stream(exponent, code, length, input.dtype, reshuff), fixed, var)


# -- decode -----------------------------------------------------------------------------------

def _read_stream(fixed: torch.Tensor, var: torch.Tensor, count: int) -> torch.Tensor:
    head = _bytes_of(fixed)
    if count <= head.numel():
        return head[:count]
    return torch.cat([head, _bytes_of(var)[:count - head.numel()]])


def _parse_header(fixed, var, dtype, numel: int, reshuff: bool) -> None:
    header = _read_stream(fixed, var, _HEADER).tolist()
    stored = sum(header[8 + k] << (8 * k) for k in range(8))
    ok = bytes(header[:4]) == _MAGIC and header[4] == _VERSION
    checks.expect(ok, DECODE, "fixed", "a stream written by npu_hans_encode (header "
                  "b'HANS')", f"header bytes {header[:5]}", ValueError)
    checks.expect(header[5] == _DTYPE_CODE[dtype] and stored == numel, DECODE, "out",
                  lambda: f"the encoded tensor's dtype and size (code {header[5]}, {stored} "
                  "elements)", f"{str(dtype)[6:]} of {numel} elements", ValueError)
    checks.expect(header[6] == int(reshuff), DECODE, "reshuff", f"the value the encode used "
                  f"({bool(header[6])})", reshuff, ValueError)


def hans_decode_reference(mantissa, fixed, var, pdf, reshuff=False, *, out):
    numel, device = out.numel(), out.device
    _parse_header(fixed, var, out.dtype, numel, reshuff)
    blocks = numel // _BLOCK
    table = _read_stream(fixed, var, _HEADER + blocks)[_HEADER:].to(torch.int64)
    raw = table == _RAW
    sizes = torch.where(raw, torch.full_like(table, _BLOCK), table)
    total = int(sizes.sum())
    payload = _read_stream(fixed, var, _HEADER + blocks + total)[_HEADER + blocks:]
    starts = torch.cumsum(sizes, 0) - sizes
    exponent = torch.zeros(blocks, _BLOCK, dtype=torch.int64, device=device)
    if bool(raw.any()):
        rows = torch.nonzero(raw).reshape(-1)
        where = starts[rows].unsqueeze(1) + torch.arange(_BLOCK, device=device)
        exponent[rows] = payload[where].to(torch.int64)
    keep = ~raw
    if bool(keep.any()):
        symbol_of, length_of = _decode_table(pdf, device)
        rows = torch.nonzero(keep).reshape(-1)
        # int32 throughout the loop: 3 bytes shifted by at most 7 bits fit in 31 bits
        data = torch.cat([payload.to(torch.int32), payload.new_zeros(3, dtype=torch.int32)])
        window_mask = (1 << _MAX_BITS) - 1
        p = (starts[rows] * 8).to(torch.int32)                # next bit of each coded block
        decoded = torch.empty(_BLOCK, rows.numel(), dtype=torch.int32, device=device)
        for e in range(_BLOCK):
            b = p >> 3
            window = ((data[b] | (data[b + 1] << 8) | (data[b + 2] << 16)) >> (p & 7)) \
                & window_mask
            decoded[e] = symbol_of[window]
            p += length_of[window]
        exponent[rows] = decoded.t().to(torch.int64)
    low = _bytes_of(mantissa)
    out.copy_(_join(exponent.reshape(-1), low, out.dtype).reshape(out.shape))


_NO_GRAD = "torch_npu defines no backward for the HANS codec"
_, hans_encode_out_op = define_out(ENCODE_SCHEMA, check=check_hans_encode,
                                   reference=hans_encode_reference, no_grad=_NO_GRAD)
_, hans_decode_out_op = define_out(DECODE_SCHEMA, check=check_hans_decode,
                                   reference=hans_decode_reference, no_grad=_NO_GRAD)


def npu_hans_encode(input, statistic=False, reshuff=False, out=None, *, pdf=None,
                    mantissa=None, fixed=None, var=None):
    """Compress ``input`` losslessly: mantissa bytes as they are, exponent bytes entropy-coded.

    Parameters
    ----------
    input : Tensor
        float16, bfloat16 or float32; numel a multiple of 64 and at least 32768.
    statistic : bool
        True: count ``input``'s exponent bytes into ``pdf`` (overwritten) and code with that;
        False: code with the given ``pdf``.
    reshuff : bool
        True: the whole compressed stream goes into ``fixed`` (``var`` unused); pass the same
        value to :func:`npu_hans_decode`.
    out : tuple (pdf, mantissa, fixed, var), optional
        The doc's spelling of the four written tensors (also accepted as keywords):

        * ``pdf`` int32 ``[1, 256]`` (``[256]`` accepted): the exponent-byte counts;
        * ``mantissa``: ``input``'s dtype, ``mantissa.nbytes == numel * (element_size - 1)``;
        * ``fixed``, ``var``: ``input``'s dtype; ``fixed`` at least 512 bytes and
          ``fixed.nbytes + var.nbytes`` (``fixed.nbytes`` alone with ``reshuff``) at least
          ``16 + numel / 64 + numel`` bytes, which the doc's bound
          ``numel + numel / 64 + 8448 * vector cores`` always covers.

        Omitted: allocated as the doc's example does (pdf zeros ``[1, 256]``, ``fixed`` and
        ``var`` of ``numel`` elements each).

    Returns
    -------
    (pdf, mantissa, fixed, var) : the written tensors.

    Constraints
    -----------
    Strict mode: Atlas A2 and A3.

    Notes
    -----
    The NPU's bitstream is undocumented; this one (described in the module docstring: rotated
    exponent byte, canonical Huffman from ``pdf + 1``, 64-element blocks) round-trips exactly
    through :func:`npu_hans_decode` of this package, not through the NPU's decoder.  ``pdf``
    holds the counts of this split's exponent bytes (for float16 the byte also carries three
    mantissa bits).  Bytes of ``fixed`` / ``var`` past the stream are left as they were.
    No backward.
    """
    if out is not None:
        pdf, mantissa, fixed, var = out
    if pdf is None and mantissa is None and fixed is None and var is None:
        numel, esize = input.numel(), input.element_size()
        pdf = torch.zeros(1, 256, dtype=torch.int32, device=input.device)
        mantissa = input.new_zeros(numel * (esize - 1) // esize)
        fixed, var = input.new_zeros(numel), input.new_zeros(numel)
    return hans_encode_out_op(input, statistic, reshuff, pdf=pdf, mantissa=mantissa,
                              fixed=fixed, var=var)


def npu_hans_decode(mantissa, fixed, var, pdf, reshuff=False, out=None):
    """Restore the tensor :func:`npu_hans_encode` compressed, bit for bit, into ``out``.

    Parameters
    ----------
    mantissa, fixed, var, pdf : Tensor
        :func:`npu_hans_encode`'s outputs (the ``pdf`` it coded with).
    reshuff : bool
        The value the encode used (checked against the stream; ValueError if it differs).
    out : Tensor
        The original's dtype (float16, bfloat16 or float32), numel a multiple of 64 and at least
        32768, with ``mantissa.nbytes == out.numel() * (element_size - 1)``; its shape is free.

    Returns
    -------
    Tensor
        ``out``, holding the original values.

    Notes
    -----
    Reads this package's stream (see :func:`npu_hans_encode`); a stream whose header does not
    match ``out``'s dtype and size raises ValueError before ``out`` is written.  No backward.
    """
    checks.expect(out is not None, DECODE, "out", "a tensor to decode into (its dtype and "
                  "size say what was encoded)", "None", TypeError)
    return hans_decode_out_op(mantissa, fixed, var, pdf, reshuff, out=out)


TORCH_NPU_FUNCTIONS = {
    ENCODE: npu_hans_encode,
    DECODE: npu_hans_decode,
}
