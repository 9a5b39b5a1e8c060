"""The torch_npu engine of npu_anywhere.models against Hugging Face transformers (eager).

Same config, same seeded weights; the engine serves several prompts with continuous batching
and a paged cache, transformers runs its own KV-cached greedy loop per prompt.  Greedy tokens
must be identical and every step's logits within a float32 tolerance.
"""

import pytest
import torch

transformers = pytest.importorskip("transformers")

import npu_anywhere  # noqa: E402
from npu_anywhere import compat  # noqa: E402
from npu_anywhere.models import ModelConfig  # noqa: E402
from npu_anywhere.models.reference import greedy, tiny_model  # noqa: E402

# Bound by the `shim` fixture: the engine is Ascend code (`import torch_npu`).
torch_npu = Engine = Request = generate = compare = logit_tolerance = None


@pytest.fixture(scope="module", autouse=True)
def shim():
    """The shim for this module's tests only, so the rest of the suite runs without it."""
    global torch_npu, Engine, Request, generate, compare, logit_tolerance
    owned = not compat.installed()
    npu_anywhere.install()
    import torch_npu
    from npu_anywhere.models import Engine, Request, generate
    from npu_anywhere.models.compare import compare, logit_tolerance
    yield
    if owned:
        npu_anywhere.uninstall()

ARCHS = ("llama", "qwen2", "qwen2_moe", "mixtral")


def requests(vocab=256, seed=0):
    """Prompts of 9, 2, 5 and 13 tokens (one longer than a 4-token block, one shorter); 4, 1, 3
    and 2 new tokens, so sequences leave the batch of 2 at different steps and the waiting ones
    are admitted mid-run."""
    g = torch.Generator().manual_seed(seed)
    shape = [(9, 4), (2, 1), (5, 3), (13, 2)]
    return [Request(torch.randint(3, vocab, (n,), generator=g).tolist(), m) for n, m in shape]


@pytest.fixture(scope="module", params=ARCHS)
def hf_model(request):
    return tiny_model(request.param)


def test_engine_matches_transformers(hf_model):
    reqs = requests()
    cmp = compare(hf_model, reqs, block_size=4, max_batch=2, time_ops=False)
    assert cmp.greedy_identical == [True] * len(reqs)
    assert [len(r.tokens) for r in cmp.results] == [r.max_new_tokens for r in reqs]
    assert cmp.max_diff <= cmp.tolerance, (cmp.step_max_diff, cmp.tolerance)
    # The tolerance is rounding-sized: far below the logits themselves.
    assert cmp.tolerance < 1e-3


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_engine_matches_transformers_in_half_precision(dtype):
    """Same comparison in the 16-bit dtypes (weights, activations and cache in the dtype)."""
    hf = tiny_model("llama", dtype=dtype)
    reqs = requests()[:3]
    cmp = compare(hf, reqs, dtype=dtype, block_size=4, max_batch=2, time_ops=False)
    assert cmp.greedy_identical == [True] * len(reqs)
    assert cmp.max_diff <= cmp.tolerance, (cmp.step_max_diff, cmp.tolerance)
    assert all(r.logits[0].dtype == torch.float32 for r in cmp.results)


def test_a_broken_op_is_caught(monkeypatch):
    """The comparison is not vacuous: a SwiGLU that scales its output by 1.001 (a subtle bug)
    or RoPE left out fails it."""
    hf = tiny_model("llama")
    reqs = requests()[:2]
    real = torch_npu.npu_swiglu
    monkeypatch.setattr(torch_npu, "npu_swiglu", lambda x, dim=-1: real(x, dim=dim) * 1.001)
    assert not compare(hf, reqs, block_size=4, max_batch=2, time_ops=False).passed
    monkeypatch.setattr(torch_npu, "npu_swiglu", real)
    monkeypatch.setattr(torch_npu, "npu_apply_rotary_pos_emb", lambda q, k, *a, **kw: (q, k))
    assert not compare(hf, reqs, block_size=4, max_batch=2, time_ops=False).passed


def test_paged_cache_layout_and_release():
    hf = tiny_model("qwen2")
    cfg = ModelConfig.from_hf(hf.config)
    eng = Engine(cfg, hf.state_dict(), block_size=4, num_blocks=16)
    free = eng.pool.free_blocks
    reqs = requests()
    with torch.no_grad():
        generate(eng, reqs, max_batch=2)
    assert eng.pool.free_blocks == free        # every finished sequence gave its blocks back
    table = [7, 3, 11]
    assert eng.pool.slots(table, 3, 6) == [7 * 4 + 3, 3 * 4 + 0, 3 * 4 + 1]
    bt = eng.pool.block_table([[1, 2], [5]], torch.device("cpu"))
    assert bt.tolist() == [[1, 2], [5, -1]] and bt.dtype == torch.int32


def test_checkpoint_directory_loads(tmp_path):
    """--model PATH: config.json + safetensors read by the engine itself."""
    from npu_anywhere.models.weights import load_checkpoint

    hf = tiny_model("llama", seed=3)
    hf.save_pretrained(tmp_path, safe_serialization=True)
    config, state = load_checkpoint(str(tmp_path))
    eng = Engine(ModelConfig.from_hf(config), state, block_size=8, num_blocks=8)
    prompt = requests()[0].prompt
    with torch.no_grad():
        res = generate(eng, [Request(prompt, 3)])
    tokens, logits, _ = greedy(hf, prompt, 3)
    assert res[0].tokens == tokens
    tol = logit_tolerance(torch.float32, max(float(x.abs().max()) for x in logits))
    assert max(float((a - b).abs().max()) for a, b in zip(logits, res[0].logits)) <= tol


def test_unsupported_config_is_a_clean_error():
    with pytest.raises(ValueError, match="models: expected model_type one of"):
        ModelConfig.from_hf({"model_type": "gpt2"})
    with pytest.raises(ValueError, match="models: expected no rope_scaling"):
        ModelConfig.from_hf({"model_type": "llama", "rope_scaling": {"type": "linear"}})


@pytest.mark.slow
def test_full_demo_passes(capsys):
    from npu_anywhere.demo import main

    assert main(["--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out.count("-> PASS") == len(ARCHS) and "FAIL" not in out


def test_a_wrong_moe_combine_is_caught(monkeypatch):
    """finalize_routing read with the column-order index map (drop_pad_mode 0) while
    init_routing_v2 numbers rows token-major: the mix-up the MoE comparison must see."""
    hf = tiny_model("qwen2_moe")
    real = torch_npu.npu_moe_finalize_routing

    def column_order(*args, **kwargs):
        kwargs["drop_pad_mode"] = 0
        return real(*args, **kwargs)

    monkeypatch.setattr(torch_npu, "npu_moe_finalize_routing", column_order)
    assert not compare(hf, requests()[:2], block_size=4, max_batch=2, time_ops=False).passed
