"""The worker of test_two_ranks.py: one process per rank, started by torch.multiprocessing
(forked: a spawned interpreter would spend seconds importing torch; the spawn path is
covered by the shim's child-process tests).  It uses the shim's ``hccl`` backend and
the ``get_hccl_comm_name`` handle, runs every mc2_comm op once, and saves its outputs."""

import os

import torch
import torch.distributed as dist

E = 2        # experts per rank
# send_counts[r][i * E + j]: rows rank r sends to expert j of rank i.
SEND = [[2, 1, 0, 3], [1, 2, 2, 1]]


def recv_counts(rank, world):
    return [SEND[i][rank * E + j] for i in range(world) for j in range(E)]


def inputs(rank):
    """Each rank's inputs, reproducible in the parent for the goldens."""
    g = torch.Generator().manual_seed(100 + rank)

    def f(*shape, dtype=torch.float16):
        return torch.randn(*shape, generator=g).to(dtype)

    return dict(
        ar_x1=f(4, 32), ar_x2=f(32, 6), ar_bias=f(6),
        wq_x1=f(3, 32, dtype=torch.bfloat16),
        wq_x2=torch.randint(-8, 8, (32, 6), generator=g, dtype=torch.int8),
        wq_scale=(torch.rand(6, generator=g) * 0.1).to(torch.bfloat16),
        tp_x1=f(4, 32, dtype=torch.bfloat16), tp_x2=f(32, 5, dtype=torch.bfloat16),
        q_x1=torch.randint(-8, 8, (4, 32), generator=g, dtype=torch.int8),
        q_x2=torch.randint(-8, 8, (32, 5), generator=g, dtype=torch.int8),
        q_x1_scale=torch.rand(4, 1, generator=g) + 0.5, q_x2_scale=torch.rand(1, 5, generator=g),
        ep_x=f(sum(SEND[rank]), 16), ep_w=f(E, 16, 8),
        hf_x=torch.randint(0, 110, (sum(SEND[rank]), 16), generator=g, dtype=torch.uint8),
        hf_w=torch.randint(0, 110, (E, 16, 8), generator=g, dtype=torch.uint8),
    )


HF8 = dict(gmm_x_quant_mode=1, gmm_weight_quant_mode=1, gmm_x_dtype=290, gmm_weight_dtype=290)
SCALES = (torch.tensor([0.5]), torch.tensor([0.25]))


def worker(rank, world, port, out_dir):
    import npu_anywhere
    npu_anywhere.install()       # a forked child of a process without the shim needs it too
    import torch_npu

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    # No torch_npu.npu.set_device(rank): this machine has one local device.
    dist.init_process_group(backend="hccl", rank=rank, world_size=world)
    group = dist.distributed_c10d._get_default_group()
    hcom = group._get_backend(torch.device("npu")).get_hccl_comm_name(rank)
    t = {k: v.npu() for k, v in inputs(rank).items()}
    out = {}
    out["all_reduce"] = torch_npu.npu_mm_all_reduce_base(t["ar_x1"], t["ar_x2"], hcom,
                                                         reduce_op="sum", bias=t["ar_bias"])
    out["all_reduce_wq"] = torch_npu.npu_mm_all_reduce_base(t["wq_x1"], t["wq_x2"], hcom,
                                                            antiquant_scale=t["wq_scale"])
    out["reduce_scatter"] = torch_npu.npu_mm_reduce_scatter_base(t["tp_x1"], t["tp_x2"], hcom,
                                                                 world)
    out["all_gather"] = torch_npu.npu_all_gather_base_mm(t["tp_x1"], t["tp_x2"], hcom, world)
    out["all_gather_q"] = torch_npu.npu_all_gather_base_mm(
        t["q_x1"], t["q_x2"], hcom, world, x1_scale=t["q_x1_scale"], x2_scale=t["q_x2_scale"],
        output_dtype=torch.float16)
    out["alltoallv_gmm"] = torch_npu.npu_alltoallv_gmm(
        t["ep_x"], t["ep_w"], hcom, world, SEND[rank], recv_counts(rank, world),
        permute_out_flag=True)
    out["gmm_alltoallv"] = torch_npu.npu_gmm_alltoallv(
        t["ep_x"], t["ep_w"], hcom, world, SEND[rank], recv_counts(rank, world))
    sub = dist.new_group(list(range(world)), backend="hccl")
    sub_hcom = sub._get_backend(torch.device("npu")).get_hccl_comm_name(rank)
    out["subgroup"] = torch_npu.npu_mm_all_reduce_base(t["ar_x1"], t["ar_x2"], sub_hcom,
                                                       bias=t["ar_bias"])
    scales = [t.npu() for t in SCALES]
    out["alltoallv_quant_gmm"] = torch_npu.npu_alltoallv_quant_gmm(
        t["hf_x"], t["hf_w"], *scales, hcom, world, SEND[rank], recv_counts(rank, world),
        torch.bfloat16, permute_out_flag=True, **HF8)
    out["quant_gmm_alltoallv"] = torch_npu.npu_quant_gmm_alltoallv(
        t["hf_x"], t["hf_w"], *scales, hcom, world, SEND[rank], recv_counts(rank, world),
        torch.bfloat16, **HF8)
    saved = {k: [v.cpu() for v in (o if isinstance(o, tuple) else (o,))] for k, o in out.items()}
    saved["names"] = [hcom, sub_hcom]
    torch.save(saved, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()
