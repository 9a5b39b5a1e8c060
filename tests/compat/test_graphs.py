"""``torch.npu.NPUGraph`` / ``torch.npu.graph`` and the graph task API (compat/graphs.py).

Capture runs the block and records its operator calls; replay recomputes them on the same
memory.  Every check compares against the same computation run eagerly on the new inputs.
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.compat import graphs


def test_replay_recomputes_into_the_captured_outputs():
    x = torch.randn(4, 8)
    w = torch.randn(8, 8)
    acc = torch.zeros(4, 8)
    g = graphs.NPUGraph()
    with graphs.graph(g):
        assert graphs.is_current_stream_capturing()
        h = torch.relu(x @ w)
        scratch = torch.empty(4, 8)                 # allocation only: not replayed
        scratch.copy_(h * 2)
        acc.add_(scratch)                            # in place on a caller's tensor
        y = na.npu_rms_norm(h.t()[:, :3].contiguous(), torch.ones(3))[0]
    assert not graphs.is_current_stream_capturing()
    outputs = (h, y)
    for _ in range(2):
        x.copy_(torch.randn(4, 8))
        g.replay()
        want_h = torch.relu(x @ w)
        assert outputs[0] is h and torch.equal(h, want_h)
        assert torch.equal(scratch, want_h * 2)
        assert torch.equal(y, na.npu_rms_norm(want_h.t()[:, :3].contiguous(), torch.ones(3))[0])
    # acc took the captured run plus the two replays
    assert acc.abs().sum() > 0


def test_host_arguments_are_fixed_at_capture():
    x = torch.arange(6.0)
    sizes = [2, 4]
    g = graphs.NPUGraph()
    with graphs.graph(g):
        parts = torch.split_with_sizes(x, sizes)
        total = parts[1].sum()
    sizes[0], sizes[1] = 3, 3                       # the caller reuses its list
    x.copy_(torch.arange(6.0) * 10)
    g.replay()
    assert float(total) == 20 + 30 + 40 + 50


def test_task_group_update_changes_a_captured_attention_call():
    """vllm-ascend's decode pattern: capture the attention .out call in a task group, give it
    new sequence lengths with graph_task_update_begin/end, replay."""
    torch.manual_seed(0)
    b, heads, dim, block = 2, 2, 8, 4
    q = torch.randn(b, heads, 1, dim, dtype=torch.float16)
    cache = torch.randn(8, block, dim, dtype=torch.float16)
    table = torch.arange(8, dtype=torch.int32).view(b, 4)

    def attend(lens, out=None):
        kw = dict(num_query_heads=heads, num_key_value_heads=1, input_layout="BNSD",
                  softmax_scale=dim ** -0.5, block_table=table, block_size=block,
                  actual_seq_kvlen=lens)
        if out is None:
            return na.npu_fused_infer_attention_score_v2(q, cache, cache, **kw)[0]
        return torch.ops.npu.npu_fused_infer_attention_score_v2.out(
            q, cache, cache, **kw, attention_out=out[0], softmax_lse=out[1])

    short, long = attend([5, 3]), attend([16, 9])
    assert not torch.equal(short, long)
    out = (torch.empty_like(q), torch.empty(b, heads, 1, 1))
    g = graphs.NPUGraph()
    with graphs.graph(g):
        graphs.graph_task_group_begin(None)
        attend([5, 3], out)
        handle = graphs.graph_task_group_end(None)
    out[0].zero_()
    g.replay()
    assert torch.equal(out[0], short)
    graphs.graph_task_update_begin(None, handle)
    attend([16, 9], out)
    graphs.graph_task_update_end(None)
    out[0].zero_()
    g.replay()
    assert torch.equal(out[0], long)
    q.mul_(2)                                        # and new inputs still flow in
    g.replay()
    assert torch.equal(out[0], attend([16, 9]))


def test_update_of_an_auto_dispatch_capture():
    x = torch.randn(2, 6)
    g = graphs.NPUGraph()
    with graphs.graph(g, auto_dispatch_capture=True):
        y = na.npu_moe_gating_top_k_softmax_v2(x, k=2, renorm=0)[0]
    g.update([{"k": 2, "renorm": 1}])
    g.replay()
    assert torch.equal(y, na.npu_moe_gating_top_k_softmax_v2(x, k=2, renorm=1)[0])
    with pytest.raises(RuntimeError, match="expected 1 entries"):
        g.update([{"renorm": 1}, {"renorm": 0}])
    plain = graphs.NPUGraph()
    with graphs.graph(plain):
        torch.relu(x)
    with pytest.raises(RuntimeError, match="auto_dispatch_capture=True"):
        plain.update([{"k": 1}])


def test_misuse_raises_clearly():
    g = graphs.NPUGraph()
    with pytest.raises(ValueError, match="expected capture_error_mode"):
        g.capture_begin(capture_error_mode="loose")
    with pytest.raises(RuntimeError, match="no capture is underway"):
        g.capture_end()
    with pytest.raises(RuntimeError, match="expected a graph capture underway"):
        graphs.graph_task_group_begin(None)
    with pytest.raises(RuntimeError, match="expected an open graph_task_group_begin"):
        graphs.graph_task_group_end(None)
    with pytest.raises(TypeError, match="expected handle a graph_task_group_end result"):
        graphs.graph_task_update_begin(None, 7)
    x = torch.randn(3)
    with graphs.graph(g):
        with pytest.raises(RuntimeError, match="already underway"):
            graphs.NPUGraph().capture_begin()
        graphs.graph_task_group_begin(None)
        y = x * 2
        handle = graphs.graph_task_group_end(None)
    graphs.graph_task_update_begin(None, handle)
    x * 3
    x + 1
    with pytest.raises(RuntimeError, match="launched 2 operator calls"):
        graphs.graph_task_update_end(None)
    g.replay()
    assert torch.equal(y, x * 2)                     # the refused update changed nothing
    dynamic = graphs.NPUGraph()
    mask = torch.tensor([True, False, True])
    with graphs.graph(dynamic):
        picked = x[mask]
    mask.fill_(True)
    with pytest.raises(RuntimeError, match="a graph replays fixed shapes"):
        dynamic.replay()
    assert picked.shape == (2,)


def test_shim_exposes_the_graph_api(monkeypatch):
    import sys

    from npu_anywhere import compat
    if na.library.REAL_TORCH_NPU or compat.installed():
        pytest.skip("a real torch_npu is installed, or the shim already is in this process")
    monkeypatch.setenv("NPU_ANYWHERE_DEVICE", "cpu")
    na.install(device_strings_enabled=False)
    try:
        import torch_npu
        for name in graphs.API:
            assert getattr(torch.npu, name) is getattr(graphs, name)
            assert getattr(torch_npu.npu, name) is getattr(graphs, name)
        x = torch.ones(3)
        g = torch.npu.NPUGraph()
        with torch.npu.graph(g, pool=torch.npu.graph_pool_handle()):
            y = x * 2
        x.fill_(4)
        g.replay()
        assert y.tolist() == [8.0, 8.0, 8.0]
        event = torch.npu.ExternalEvent()
        event.wait(torch.npu.current_stream())
        event.reset(None)
        layer = torch.nn.Linear(3, 3)
        assert torch.npu.make_graphed_callables(layer, (x,)) is layer
    finally:
        na.uninstall()
    assert "torch_npu" not in sys.modules
