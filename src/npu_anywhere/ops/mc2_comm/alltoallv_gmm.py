"""torch_npu.npu_alltoallv_gmm and torch_npu.npu_gmm_alltoallv: the expert-parallel
all-to-all-v of token rows fused with the grouped matmul of the local experts, and an optional
shared-expert matmul.

Formulas (seed 004; hicann/ops-transformer ``mc2/allto_allv_grouped_mat_mul/README.md`` and
``mc2/grouped_mat_mul_allto_allv/README.md``)::

    alltoallv_gmm:  ata_out = alltoallv(gmm_x); permute_out = permute(ata_out)
                    gmm_y = permute_out x gmm_weight          (communicate, then compute)
    gmm_alltoallv:  gmm_y = gmm_x x gmm_weight; y = alltoallv(unpermute(gmm_y))
    both:           mm_y = mm_x x mm_weight

Count layout and permutation: ``_ep.py``.  Each expert's matmul is float32, rounded once to the
input dtype; rows travel in that dtype.  Output shapes as op-plugin's meta functions
(``[sum(recv_counts), N1]``); the absent outputs (``mm_y`` without mm_x, ``permute_out``
without permute_out_flag), undefined tensors on the NPU, are empty ``[0]`` tensors.
"""

from __future__ import annotations

from ... import targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...params import accept_alias
from ...targets import Product
from . import _comm, _ep

ALLTOALLV_GMM = "npu_alltoallv_gmm"
GMM_ALLTOALLV = "npu_gmm_alltoallv"
ALLTOALLV_GMM_SCHEMA = (
    "npu_alltoallv_gmm(Tensor gmm_x, Tensor gmm_weight, str hcom, int ep_world_size, "
    "int[] send_counts, int[] recv_counts, *, Tensor? send_counts_tensor=None, "
    "Tensor? recv_counts_tensor=None, Tensor? mm_x=None, Tensor? mm_weight=None, "
    "bool trans_gmm_weight=False, bool trans_mm_weight=False, bool permute_out_flag=False, "
    "str? comm_mode=None) -> (Tensor, Tensor, Tensor)")
GMM_ALLTOALLV_SCHEMA = (
    "npu_gmm_alltoallv(Tensor gmm_x, Tensor gmm_weight, str hcom, int ep_world_size, "
    "int[] send_counts, int[] recv_counts, *, Tensor? send_counts_tensor=None, "
    "Tensor? recv_counts_tensor=None, Tensor? mm_x=None, Tensor? mm_weight=None, "
    "bool trans_gmm_weight=False, bool trans_mm_weight=False, str? comm_mode=None) "
    "-> (Tensor, Tensor)")

_SUPPORTED = frozenset({Product.A3})


def check_alltoallv_gmm(gmm_x, gmm_weight, hcom, ep_world_size, send_counts, recv_counts, *,
                        send_counts_tensor=None, recv_counts_tensor=None, mm_x=None,
                        mm_weight=None, trans_gmm_weight=False, trans_mm_weight=False,
                        permute_out_flag=False, comm_mode=None):
    _ep.check(ALLTOALLV_GMM, gmm_x, gmm_weight, hcom, ep_world_size, send_counts, recv_counts,
              send_counts_tensor, recv_counts_tensor, mm_x, mm_weight, trans_gmm_weight,
              trans_mm_weight)
    targets.expect_supported(ALLTOALLV_GMM, _SUPPORTED)


def check_gmm_alltoallv(gmm_x, gmm_weight, hcom, ep_world_size, send_counts, recv_counts, *,
                        send_counts_tensor=None, recv_counts_tensor=None, mm_x=None,
                        mm_weight=None, trans_gmm_weight=False, trans_mm_weight=False,
                        comm_mode=None):
    _ep.check(GMM_ALLTOALLV, gmm_x, gmm_weight, hcom, ep_world_size, send_counts, recv_counts,
              send_counts_tensor, recv_counts_tensor, mm_x, mm_weight, trans_gmm_weight,
              trans_mm_weight)
    targets.expect_supported(GMM_ALLTOALLV, _SUPPORTED)


def alltoallv_gmm_reference(gmm_x, gmm_weight, hcom, ep_world_size, send_counts, recv_counts, *,
                            send_counts_tensor=None, recv_counts_tensor=None, mm_x=None,
                            mm_weight=None, trans_gmm_weight=False, trans_mm_weight=False,
                            permute_out_flag=False, comm_mode=None):
    e = gmm_weight.shape[0]
    arrived = _comm.all_to_all_rows(gmm_x, hcom, _ep.per_rank(send_counts, e),
                                    _ep.per_rank(recv_counts, e))
    permuted = _ep.rank_major_to_expert_major(arrived, recv_counts, e)
    gmm_y = _ep.grouped_mm(permuted, gmm_weight, _ep.per_expert(recv_counts, e),
                           trans_gmm_weight)
    mm_y = _ep.shared_mm(mm_x, mm_weight, trans_mm_weight, gmm_x)
    return gmm_y, mm_y, permuted if permute_out_flag else gmm_x.new_empty((0,))


def gmm_alltoallv_reference(gmm_x, gmm_weight, hcom, ep_world_size, send_counts, recv_counts, *,
                            send_counts_tensor=None, recv_counts_tensor=None, mm_x=None,
                            mm_weight=None, trans_gmm_weight=False, trans_mm_weight=False,
                            comm_mode=None):
    e = gmm_weight.shape[0]
    gmm_y = _ep.grouped_mm(gmm_x, gmm_weight, _ep.per_expert(send_counts, e), trans_gmm_weight)
    outgoing = _ep.expert_major_to_rank_major(gmm_y, send_counts, e)
    y = _comm.all_to_all_rows(outgoing, hcom, _ep.per_rank(send_counts, e),
                              _ep.per_rank(recv_counts, e))
    return y, _ep.shared_mm(mm_x, mm_weight, trans_mm_weight, gmm_x)


def alltoallv_gmm_fake(gmm_x, gmm_weight, hcom, ep_world_size, send_counts, recv_counts, *,
                       mm_x=None, mm_weight=None, trans_gmm_weight=False, trans_mm_weight=False,
                       permute_out_flag=False, **kwargs):
    y, mm_y = _ep.fake_outputs(gmm_x, gmm_weight, recv_counts, mm_x, mm_weight,
                               trans_gmm_weight, trans_mm_weight)
    permuted = gmm_x.new_empty((sum(recv_counts), gmm_x.shape[1]) if permute_out_flag else (0,))
    return y, mm_y, permuted


def gmm_alltoallv_fake(gmm_x, gmm_weight, hcom, ep_world_size, send_counts, recv_counts, *,
                       mm_x=None, mm_weight=None, trans_gmm_weight=False, trans_mm_weight=False,
                       **kwargs):
    return _ep.fake_outputs(gmm_x, gmm_weight, recv_counts, mm_x, mm_weight, trans_gmm_weight,
                            trans_mm_weight)


alltoallv_gmm_op = NpuOp(ALLTOALLV_GMM_SCHEMA, namespace=TORCH_NPU_NS, check=check_alltoallv_gmm,
                         reference=alltoallv_gmm_reference, fake=alltoallv_gmm_fake,
                         info=OpInfo(api="torch_npu"))
gmm_alltoallv_op = NpuOp(GMM_ALLTOALLV_SCHEMA, namespace=TORCH_NPU_NS, check=check_gmm_alltoallv,
                         reference=gmm_alltoallv_reference, fake=gmm_alltoallv_fake,
                         info=OpInfo(api="torch_npu"))
for _op in (alltoallv_gmm_op, gmm_alltoallv_op):
    _op.forbid_autograd(f"{_op.name} has no backward (op-plugin's derivatives.yaml defines none)")


_COMMON_PARAMS = """
    Parameters
    ----------
    gmm_x : Tensor
        ``[sum(send_counts), H1]`` float16 / bfloat16: the rows this rank sends, grouped by
        destination rank then expert (alltoallv_gmm) or by local expert then destination
        rank (gmm_alltoallv).
    gmm_weight : Tensor
        ``[e, H1, N1]`` (``[e, N1, H1]`` with trans_gmm_weight), gmm_x's dtype.
    hcom : str
        The expert-parallel group's communicator name (``group=`` is accepted too); an unknown
        name or no process group means one rank.
    ep_world_size : int
        The group's size (1 without a group).
    send_counts, recv_counts : list of int
        ``e * ep_world_size`` non-negative counts, rank-major: entry ``i * e + j`` is the rows
        sent to (received from) rank i for expert j.
    send_counts_tensor, recv_counts_tensor : Tensor, optional
        Not supported (as on the NPU): must be None.
    mm_x, mm_weight : Tensor, optional
        The shared expert: ``[M, H2]`` and ``[H2, N2]`` (``[N2, H2]`` with trans_mm_weight).
    trans_gmm_weight, trans_mm_weight : bool
        The weights are given transposed.
    comm_mode : str, optional
        Accepted and ignored.
"""


def npu_alltoallv_gmm(gmm_x, gmm_weight, hcom=None, ep_world_size=None, send_counts=None,
                      recv_counts=None, *, send_counts_tensor=None, recv_counts_tensor=None,
                      mm_x=None, mm_weight=None, trans_gmm_weight=False, trans_mm_weight=False,
                      permute_out_flag=False, comm_mode=None, **kwargs):
    if kwargs:
        hcom = accept_alias(ALLTOALLV_GMM, "hcom", hcom, "group", kwargs)
    return alltoallv_gmm_op(gmm_x, gmm_weight, hcom, ep_world_size, send_counts, recv_counts,
                            send_counts_tensor=send_counts_tensor,
                            recv_counts_tensor=recv_counts_tensor, mm_x=mm_x,
                            mm_weight=mm_weight, trans_gmm_weight=trans_gmm_weight,
                            trans_mm_weight=trans_mm_weight, permute_out_flag=permute_out_flag,
                            comm_mode=comm_mode)


def npu_gmm_alltoallv(gmm_x, gmm_weight, hcom=None, ep_world_size=None, send_counts=None,
                      recv_counts=None, *, send_counts_tensor=None, recv_counts_tensor=None,
                      mm_x=None, mm_weight=None, trans_gmm_weight=False, trans_mm_weight=False,
                      comm_mode=None, **kwargs):
    if kwargs:
        hcom = accept_alias(GMM_ALLTOALLV, "hcom", hcom, "group", kwargs)
    return gmm_alltoallv_op(gmm_x, gmm_weight, hcom, ep_world_size, send_counts, recv_counts,
                            send_counts_tensor=send_counts_tensor,
                            recv_counts_tensor=recv_counts_tensor, mm_x=mm_x,
                            mm_weight=mm_weight, trans_gmm_weight=trans_gmm_weight,
                            trans_mm_weight=trans_mm_weight, comm_mode=comm_mode)


npu_alltoallv_gmm.__doc__ = """All-to-all-v of token rows to the experts' ranks, then each
    local expert's matmul (expert parallelism, communicate first), plus a shared expert.

    Formula (seed 004; ops-transformer ``mc2/allto_allv_grouped_mat_mul/README.md``)::

        ata_out     = alltoallv(gmm_x)                 (rank-major: source rank, then expert)
        permute_out = permute(ata_out)                 (expert-major: expert, then source rank)
        gmm_y       = permute_out x gmm_weight         (expert j: sum_i recv_counts[i*e+j] rows)
        mm_y        = mm_x x mm_weight
""" + _COMMON_PARAMS + """    permute_out_flag : bool
        Also return permute_out.

    Returns
    -------
    (gmm_y, mm_y, permute_out)
        ``[sum(recv_counts), N1]`` in gmm_x's dtype; ``[M, N2]`` (an empty ``[0]`` tensor
        without mm_x: the NPU's undefined tensor); ``[sum(recv_counts), H1]`` (``[0]`` unless
        permute_out_flag).

    Constraints
    -----------
    Strict mode: Atlas A3.

    Notes
    -----
    Each expert's matmul is float32, rounded once.  No backward.

    Examples
    --------
    >>> x, w = torch.randn(6, 16, dtype=torch.float16), torch.randn(2, 16, 8, dtype=torch.float16)
    >>> y, mm_y, perm = npu_anywhere.npu_alltoallv_gmm(x, w, "no_group", 1, [4, 2], [4, 2],
    ...                                                permute_out_flag=True)
    >>> y.shape, mm_y.shape, perm.shape
    (torch.Size([6, 8]), torch.Size([0]), torch.Size([6, 16]))
    """

npu_gmm_alltoallv.__doc__ = """Each local expert's matmul, then the all-to-all-v of the result
    rows back to the tokens' ranks (expert parallelism, compute first), plus a shared expert.

    Formula (seed 004; ops-transformer ``mc2/grouped_mat_mul_allto_allv/README.md``)::

        gmm_y  = gmm_x x gmm_weight          (expert j: sum_i send_counts[i*e+j] rows)
        y      = alltoallv(unpermute(gmm_y)) (sent rank-major; received from rank i, expert j
                                              at recv_counts[i*e+j])
        mm_y   = mm_x x mm_weight
""" + _COMMON_PARAMS + """
    Returns
    -------
    (y, mm_y)
        ``[sum(recv_counts), N1]`` in gmm_x's dtype; ``[M, N2]`` (an empty ``[0]`` tensor
        without mm_x: the NPU's undefined tensor).

    Constraints
    -----------
    Strict mode: Atlas A3.

    Notes
    -----
    Each expert's matmul is float32, rounded once before the rows travel.  No backward.

    Examples
    --------
    >>> x, w = torch.randn(6, 16, dtype=torch.float16), torch.randn(2, 16, 8, dtype=torch.float16)
    >>> y, mm_y = npu_anywhere.npu_gmm_alltoallv(x, w, "no_group", 1, [4, 2], [4, 2])
    >>> y.shape
    torch.Size([6, 8])
    """

TORCH_NPU_FUNCTIONS = {ALLTOALLV_GMM: npu_alltoallv_gmm, GMM_ALLTOALLV: npu_gmm_alltoallv}
