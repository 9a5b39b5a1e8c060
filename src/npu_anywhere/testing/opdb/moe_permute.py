"""Op database entries of the routing-map permute / unpermute (+ their backward ops) and the EPLB
expert update."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry

_I32 = torch.int32


def _map(t=5, e=4, k=2, dtype=torch.bool, seed=0):
    """A (t, e) routing map with exactly k ones per row."""
    gen = torch.Generator().manual_seed(seed)
    scores = torch.rand(t, e, generator=gen)
    chosen = scores.topk(k, dim=1).indices
    return torch.zeros(t, e, dtype=torch.bool).scatter(1, chosen, True).to(dtype)


def _tokens(t=5, h=6, dtype=torch.float32):
    return torch.randn(t, h, dtype=torch.float64).to(dtype)


def _permute() -> None:
    p = entry("npu_moe_token_permute_with_routing_map")
    p.samples += [
        Sample("bool_topk2_probs_bf16", lambda: ((_tokens(dtype=torch.bfloat16), _map()), {
            "probs": torch.rand(5, 4).to(torch.bfloat16), "num_out_tokens": 10})),
        Sample("int8_topk1_default_n", lambda: ((_tokens(), _map(k=1, dtype=torch.int8)), {})),
        Sample("drop_and_pad_fp16", lambda: ((_tokens(dtype=torch.float16), _map(k=1)), {
            "probs": torch.rand(5, 4).to(torch.float16), "num_out_tokens": 9,
            "drop_and_pad": True})),
        Sample("fp64_probs", lambda: ((_tokens(dtype=torch.float64), _map()), {
            "probs": torch.rand(5, 4, dtype=torch.float64), "num_out_tokens": 10})),
        Sample("fp64_drop_and_pad", lambda: ((_tokens(dtype=torch.float64), _map()), {
            "probs": torch.rand(5, 4, dtype=torch.float64), "num_out_tokens": 8,
            "drop_and_pad": True})),
    ]
    # routing_map is an integer positional input, which opcheck's autograd pass would ask to
    # require grad: gradcheck lives in tests/ops/moe.
    op = "npu_moe_token_permute_with_routing_map"
    p.errors += [
        ErrorSample("map_dtype", lambda: ((_tokens(), _map().to(_I32)), {}), TypeError,
                    f"{op}: expected routing_map dtype in"),
        ErrorSample("rows", lambda: ((_tokens(4), _map()), {"num_out_tokens": 10}),
                    RuntimeError, f"{op}: expected tokens routing_map.size"),
        ErrorSample("num_out_too_big", lambda: ((_tokens(), _map()), {"num_out_tokens": 21}),
                    ValueError, f"{op}: expected num_out_tokens in"),
        ErrorSample("probs_dtype", lambda: ((_tokens(), _map()), {
            "probs": torch.rand(5, 4, dtype=torch.float16), "num_out_tokens": 10}),
            TypeError, f"{op}: expected probs tokens' dtype"),
    ]
    g = entry("npu_moe_token_permute_with_routing_map_grad")
    inverse = torch.tensor([0, 5, 1, 6, 2, 7, 3, 8, 4, 9], dtype=_I32)
    g.samples += [
        Sample("probs", lambda: ((torch.randn(10, 6), torch.randn(10), inverse, _map(), 4, 5,
                                  False), {})),
        Sample("drop_and_pad_no_probs", lambda: ((torch.randn(8, 3).to(torch.bfloat16), None,
                                                  torch.tensor([0, 3, 1, 2, 4, 0, 2, 3],
                                                               dtype=_I32),
                                                  _map(), 4, 5, True), {})),
    ]
    g.errors += [
        ErrorSample("indices_len", lambda: ((torch.randn(10, 6), None, inverse[:8], _map(), 4, 5,
                                             False), {}), RuntimeError,
                    "npu_moe_token_permute_with_routing_map_grad: expected sorted_indices"),
        ErrorSample("map_shape", lambda: ((torch.randn(10, 6), None, inverse, _map(), 3, 5,
                                           False), {}), RuntimeError,
                    "npu_moe_token_permute_with_routing_map_grad: expected routing_map shape"),
    ]


def _unpermute() -> None:
    # Index inputs built as op-plugin's golden builds them, for _map() (5 tokens, 4 experts,
    # 2 ones per row): no padding, the slot rows; padding (capacity 2), each row's token.
    op = "npu_moe_token_unpermute_with_routing_map"
    slots = lambda: torch.tensor([0, 5, 1, 6, 2, 7, 3, 8, 4, 9], dtype=_I32)  # noqa: E731
    padded = lambda: torch.tensor([0, 3, 1, 2, 4, 0, 2, 3], dtype=_I32)      # noqa: E731
    u = entry(op)
    u.samples += [
        Sample("topk2_probs_bf16_fp32_probs", lambda: (
            (torch.randn(10, 6).to(torch.bfloat16), slots(), [5, 6]),
            {"probs": torch.rand(5, 4), "routing_map": _map()})),
        Sample("topk2_no_probs", lambda: ((torch.randn(10, 3), slots(), [5, 3]), {})),
        Sample("drop_and_pad_fp64_probs", lambda: (
            (torch.randn(8, 3, dtype=torch.float64), padded(), [5, 3]),
            {"probs": torch.rand(5, 4, dtype=torch.float64),
             "routing_map": _map(dtype=torch.int8), "drop_and_pad": True})),
    ]
    u.errors += [
        ErrorSample("rows", lambda: ((torch.randn(9, 6), slots(), [5, 6]), {}), RuntimeError,
                    f"{op}: expected permuted_tokens sorted_indices.size"),
        ErrorSample("restore_shape", lambda: ((torch.randn(10, 6), slots(), [5, 4]), {}),
                    ValueError, f"{op}: expected restore_shape"),
        ErrorSample("probs_without_map", lambda: ((torch.randn(10, 6), slots(), [5, 6]), {
            "probs": torch.rand(5, 4)}), ValueError, f"{op}: expected routing_map a tensor"),
    ]
    f = entry("_" + op)
    f.samples += [
        Sample("drop_and_pad_probs", lambda: ((torch.randn(8, 3), padded(), [5, 3]), {
            "probs": torch.rand(5, 4), "routing_map": _map(), "drop_and_pad": True})),
        Sample("topk2_fp16_no_probs", lambda: (
            (torch.randn(10, 3).to(torch.float16), slots(), [5, 3]), {})),
    ]
    f.errors += [
        ErrorSample("map_shape", lambda: ((torch.randn(8, 3), padded(), [5, 3]), {
            "probs": torch.rand(4, 4), "routing_map": _map()[:4], "drop_and_pad": True}),
            RuntimeError, f"_{op}: expected routing_map shape"),
    ]
    g = entry(op + "_grad")
    order = lambda: torch.sort(padded(), stable=True)  # noqa: E731
    g.samples += [
        Sample("topk2_probs", lambda: ((torch.randn(5, 6), slots(), slots(), _map(),
                                        torch.randn(10, 6), torch.rand(5, 4), False, [5, 6]),
                                       {})),
        Sample("drop_and_pad_probs_bf16", lambda: (
            (torch.randn(5, 3).to(torch.bfloat16), order()[1].to(_I32), order()[0].to(_I32),
             _map(), torch.randn(8, 3).to(torch.bfloat16), torch.rand(5, 4).to(torch.bfloat16),
             True, [5, 3]), {})),
        Sample("drop_and_pad_no_probs", lambda: (
            (torch.randn(5, 3), order()[1].to(_I32), order()[0].to(_I32), None, None, None,
             True, [5, 3]), {})),
    ]
    g.errors += [
        ErrorSample("permuted_missing", lambda: ((torch.randn(5, 6), slots(), slots(), _map(),
                                                  None, torch.rand(5, 4), False, [5, 6]), {}),
                    ValueError, f"{op}_grad: expected permuted_tokens a tensor"),
    ]


def _table():
    # 6 logical experts, F = 4: instance counts 1..3, physical ids in columns 1..3.
    return torch.tensor([[1, 4, 0, 0], [2, 0, 7, 0], [3, 1, 2, 3], [1, 6, 0, 0],
                         [2, 5, 3, 0], [3, 2, 6, 7]], dtype=_I32)


def _ids(bs=5, k=3, dtype=_I32):
    return (torch.arange(bs * k).reshape(bs, k) * 7 % 6).to(dtype)


def _update_expert() -> None:
    u = entry("npu_moe_update_expert")
    scales = lambda: torch.sort(torch.rand(5, 3), dim=1, descending=True).values  # noqa: E731
    u.samples += [
        Sample("by_rank", lambda: ((_ids(), _table()), {"local_rank_id": 3,
                                                         "world_size": 4})),
        Sample("by_token_int64_pruned", lambda: ((_ids(dtype=torch.int64), _table()), {
            "balance_mode": 1, "expert_scales": scales().to(torch.bfloat16),
            "pruning_threshold": torch.full((1, 3), 0.3),
            "active_mask": torch.tensor([True, True, True, False, False])})),
    ]
    u.errors += [
        ErrorSample("world_size", lambda: ((_ids(), _table()), {"local_rank_id": 0}),
                    ValueError, "npu_moe_update_expert: expected world_size in"),
        ErrorSample("threshold_alone", lambda: ((_ids(), _table()), {
            "balance_mode": 1, "pruning_threshold": torch.full((3,), 0.3)}), ValueError,
            "npu_moe_update_expert: expected pruning_threshold a tensor exactly when"),
        ErrorSample("table_dtype", lambda: ((_ids(), _table().long()), {"balance_mode": 1}),
                    TypeError, "npu_moe_update_expert: expected eplb_table dtype in"),
    ]


_permute()
_unpermute()
_update_expert()
