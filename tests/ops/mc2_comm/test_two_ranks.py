"""Two processes over the shim's ``hccl`` (gloo) backend: every collective kind against the
float64 golden of the concatenated / summed computation (doc formulas, seed 004 and
ops-transformer mc2/*/README.md).  One pair of processes serves all the checks."""

import os
import socket
import sys

import pytest
import torch
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(__file__))
import _ranks  # noqa: E402

WORLD = 2


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out_dir = str(tmp_path_factory.mktemp("mc2_ranks"))
    mp.start_processes(_ranks.worker, args=(WORLD, _free_port(), out_dir), nprocs=WORLD,
                       join=True, start_method="fork")
    return [torch.load(os.path.join(out_dir, f"rank{r}.pt")) for r in range(WORLD)]


INPUTS = [_ranks.inputs(r) for r in range(WORLD)]


def d(t):
    return t.to(torch.float64)


def close(out, golden, dtype):
    tol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    assert out.dtype == dtype and out.shape == golden.shape
    torch.testing.assert_close(d(out), golden, rtol=tol, atol=tol * golden.abs().max().item())


def test_all_reduce(results):
    golden = sum(d(i["ar_x1"]) @ d(i["ar_x2"]) + d(i["ar_bias"]) for i in INPUTS)
    wq = sum(d(i["wq_x1"]) @ (d(i["wq_x2"]) * d(i["wq_scale"])) for i in INPUTS)
    for r in range(WORLD):
        default_name, sub_name = results[r]["names"]
        assert default_name != sub_name            # one communicator name per group
        close(results[r]["subgroup"][0], golden, torch.float16)
        close(results[r]["all_reduce"][0], golden, torch.float16)
        close(results[r]["all_reduce_wq"][0], wq, torch.bfloat16)


def test_reduce_scatter(results):
    total = sum(d(i["tp_x1"]) @ d(i["tp_x2"]) for i in INPUTS)
    rows = total.shape[0] // WORLD
    for r in range(WORLD):
        close(results[r]["reduce_scatter"][0], total[r * rows:(r + 1) * rows], torch.bfloat16)


def test_all_gather(results):
    gathered = torch.cat([i["tp_x1"] for i in INPUTS])
    q = torch.cat([i["q_x1"] for i in INPUTS])
    q_scale = torch.cat([i["q_x1_scale"] for i in INPUTS])
    for r, mine in enumerate(INPUTS):
        out, gather_out = results[r]["all_gather"]
        close(out, d(gathered) @ d(mine["tp_x2"]), torch.bfloat16)
        assert torch.equal(gather_out, gathered)
        out, gather_out = results[r]["all_gather_q"]
        golden = d(q) @ d(mine["q_x2"]) * d(mine["q_x2_scale"]) * d(q_scale)
        close(out, golden, torch.float16)
        assert torch.equal(gather_out, q)


def _hf8(codes):
    # The element decoding is the quant family's (tested there); the rest is written here.
    from npu_anywhere.ops.quant.hifloat8 import decode_hifloat8
    return d(decode_hifloat8(codes))


KINDS = [("alltoallv_gmm", "ep_x", "ep_w", d, 1.0, torch.float16),
         ("alltoallv_quant_gmm", "hf_x", "hf_w", _hf8, 0.5 * 0.25, torch.bfloat16)]


def _block(rank, dest, expert, x):
    """Rank ``rank``'s rows for expert ``expert`` of rank ``dest`` (its send layout)."""
    counts = _ranks.SEND[rank]
    start = sum(counts[:dest * _ranks.E + expert])
    return INPUTS[rank][x][start:start + counts[dest * _ranks.E + expert]]


@pytest.mark.parametrize("kind, x, w, values, scale, dtype", KINDS)
def test_alltoallv_gmm(results, kind, x, w, values, scale, dtype):
    for r in range(WORLD):
        weight = INPUTS[r][w]
        permuted = [_block(i, r, j, x) for j in range(_ranks.E) for i in range(WORLD)]
        golden = torch.cat([values(_block(i, r, j, x)) @ values(weight[j])
                            for j in range(_ranks.E) for i in range(WORLD)]) * scale
        gmm_y, mm_y, permute_out = results[r][kind]
        close(gmm_y, golden, dtype)
        assert mm_y.shape == (0,)
        assert torch.equal(permute_out, torch.cat(permuted))


@pytest.mark.parametrize("kind, x, w, values, scale, dtype",
                         [("gmm_alltoallv", *KINDS[0][1:]), ("quant_gmm_alltoallv", *KINDS[1][1:])])
def test_gmm_alltoallv(results, kind, x, w, values, scale, dtype):
    # gmm_alltoallv reads its rows expert-major: rank i's expert-j block for rank r sits at
    # position (j, r) of i's expert-major order of SEND[i].
    def expert_major_block(i, dest, expert):
        counts = _ranks.SEND[i]
        order = [(j, k) for j in range(_ranks.E) for k in range(WORLD)]
        start = sum(counts[k * _ranks.E + j] for j, k in order[:order.index((expert, dest))])
        return INPUTS[i][x][start:start + counts[dest * _ranks.E + expert]]

    for r in range(WORLD):
        golden = torch.cat([(values(expert_major_block(i, r, j)) @ values(INPUTS[i][w][j])
                             * scale).to(dtype).to(torch.float64)
                            for i in range(WORLD) for j in range(_ranks.E)])
        y, mm_y = results[r][kind]
        close(y, golden, dtype)
