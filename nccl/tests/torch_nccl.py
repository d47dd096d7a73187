"""PyTorch on mscclpp-rs's NCCL: every torch.distributed collective through the NCCL backend,
with libmscclpp_nccl.so loaded in NCCL's place, checked against a CPU reference.

    LD_PRELOAD=target/nccl/libmscclpp_nccl.so torchrun --nproc_per_node=2 nccl/tests/torch_nccl.py
    LD_PRELOAD=target/nccl/libmscclpp_nccl.so torchrun --nproc_per_node=1 nccl/tests/torch_nccl.py

Ranks use GPU `local_rank % GPUs` (two ranks share the GPU of a one-GPU machine: NCCL refuses
that, this library serves it). Every rank knows every rank's input (made from a shared seed), so
each checks its own result exactly. Tested: all_reduce with every ReduceOp torch allows on NCCL
(SUM, PRODUCT, MIN, MAX, AVG, PREMUL_SUM) on float32, float16, bfloat16, float64, int32, int64,
int8 and uint8; all_gather_into_tensor (and in place), all_gather, reduce_scatter_tensor,
broadcast and reduce from every root, all_to_all_single with equal and unequal splits, send /
recv, batch_isend_irecv, barrier; odd element counts and views at odd offsets; and inside a CUDA
graph replayed with new inputs. It prints how many calls the library served and forwarded and
fails if any was forwarded (every call here is on a one-machine communicator, all served).
"""

import ctypes
import os
import sys

import torch
import torch.distributed as dist

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
LOCAL = int(os.environ.get("LOCAL_RANK", RANK))
SEED = int(os.environ.get("MSCCLPP_RS_SEED", "12345"))
DEV = torch.device("cuda", LOCAL % torch.cuda.device_count())
torch.cuda.set_device(DEV)

CHECKS = 0


def library():
    """mscclpp-rs's statistics function, or exit: the program must run on this library."""
    try:
        lib = ctypes.CDLL(None)
        version = lib.mscclppNcclVersion
    except AttributeError:
        sys.exit("torch_nccl: mscclpp-rs's NCCL is not loaded (LD_PRELOAD=.../libmscclpp_nccl.so)")
    version.restype = ctypes.c_char_p
    return lib, version().decode()


def inputs(test, n, dtype, lo=-8, hi=9):
    """Every rank's input of a test (small integers: sums and products are exact)."""
    out = []
    for q in range(WORLD):
        g = torch.Generator().manual_seed(SEED * 1000003 + test * 1009 + q)
        if dtype == torch.uint8:
            lo2, hi2 = 0, 16
        else:
            lo2, hi2 = lo, hi
        out.append(torch.randint(lo2, hi2, (n,), generator=g).to(dtype))
    return out


def check(what, got, want):
    global CHECKS
    got = got.cpu()
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        diff = (got.double() - want.double()).abs()
        bad = int((diff > 0).sum()) if got.shape == want.shape else -1
        sys.exit(f"torch_nccl: rank {RANK}: {what}: {bad} wrong elements\n got {got[:8]}\nwant {want[:8]}")
    CHECKS += 1


def fold(xs, f):
    acc = xs[0].clone()
    for x in xs[1:]:
        acc = f(acc, x)
    return acc


def premul_factor(dtype, factor):
    """The factor NCCL applies: PyTorch hands ncclRedOpCreatePreMulSum a float for bfloat16 and
    NCCL reads the type's two bytes of it (its low half), as this library does too."""
    if dtype == torch.bfloat16:
        bits = torch.tensor([factor], dtype=torch.float32).view(torch.int32).item() & 0xFFFF
        return torch.tensor([bits], dtype=torch.int32).to(torch.int16).view(torch.bfloat16).item()
    return factor


def reduce_ref(xs, op, dtype, factor=None):
    """The reduction as NCCL defines it, computed in the element type."""
    if op == "sum":
        return fold(xs, torch.add)
    if op == "prod":
        return fold(xs, torch.mul)
    if op == "max":
        return fold(xs, torch.maximum)
    if op == "min":
        return fold(xs, torch.minimum)
    if op == "avg":
        s = fold(xs, torch.add)
        if dtype.is_floating_point:
            return (s.double() / WORLD).to(dtype)
        return torch.div(s, WORLD, rounding_mode="trunc").to(dtype)
    if op == "premul":
        return fold([x * premul_factor(dtype, factor) for x in xs], torch.add)
    raise ValueError(op)


OPS = {
    "sum": dist.ReduceOp.SUM,
    "prod": dist.ReduceOp.PRODUCT,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
    "avg": dist.ReduceOp.AVG,
}
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64, torch.int8, torch.uint8]


def test_all_reduce(test):
    n = 1001
    for dtype in DTYPES:
        for name, op in list(OPS.items()) + [("premul", None)]:
            if name == "premul" and not dtype.is_floating_point:
                continue
            if name == "prod":
                xs = inputs(test, n, dtype, -2, 3) if dtype != torch.uint8 else [x % 3 for x in inputs(test, n, dtype)]
            elif dtype in (torch.int8, torch.uint8) and name == "sum":
                xs = [x % 8 for x in inputs(test, n, dtype)]
            else:
                xs = inputs(test, n, dtype)
            test += 1
            factor = 0.5
            want = reduce_ref(xs, name, dtype, factor)
            # A view at an odd element offset of a larger buffer.
            big = torch.full((n + 7,), 3, dtype=dtype, device=DEV)
            t = big[3 : 3 + n]
            t.copy_(xs[RANK].to(DEV))
            rop = dist._make_nccl_premul_sum(factor) if name == "premul" else op
            dist.all_reduce(t, op=rop)
            check(f"all_reduce {name} {dtype}", t, want)
            check(f"all_reduce {name} {dtype} (around the view)", big[:3], torch.full((3,), 3, dtype=dtype))
    return test


def test_gathers(test):
    for dtype in (torch.float32, torch.bfloat16, torch.int8):
        for n in (1, 333, 4096 + 5):
            xs = inputs(test, n, dtype)
            test += 1
            out = torch.empty(WORLD * n, dtype=dtype, device=DEV)
            dist.all_gather_into_tensor(out, xs[RANK].to(DEV))
            check(f"all_gather_into_tensor {dtype} {n}", out, torch.cat(xs))
            # In place: the input is this rank's slot of the output.
            out2 = torch.zeros(WORLD * n, dtype=dtype, device=DEV)
            out2[RANK * n : (RANK + 1) * n].copy_(xs[RANK].to(DEV))
            dist.all_gather_into_tensor(out2, out2[RANK * n : (RANK + 1) * n])
            check(f"all_gather_into_tensor in place {dtype} {n}", out2, torch.cat(xs))
            outs = [torch.empty(n, dtype=dtype, device=DEV) for _ in range(WORLD)]
            dist.all_gather(outs, xs[RANK].to(DEV))
            for q in range(WORLD):
                check(f"all_gather {dtype} {n} from {q}", outs[q], xs[q])
            for name in ("sum", "max", "avg"):
                ys = inputs(test, WORLD * n, dtype)
                test += 1
                part = torch.empty(n, dtype=dtype, device=DEV)
                dist.reduce_scatter_tensor(part, ys[RANK].to(DEV), op=OPS[name])
                want = reduce_ref([y[RANK * n : (RANK + 1) * n] for y in ys], name, dtype)
                check(f"reduce_scatter_tensor {name} {dtype} {n}", part, want)
    return test


def test_rooted(test):
    n = 777
    for dtype in (torch.float32, torch.float16, torch.int64):
        for root in range(WORLD):
            xs = inputs(test, n, dtype)
            test += 1
            t = xs[RANK].to(DEV)
            dist.broadcast(t, src=root)
            check(f"broadcast {dtype} from {root}", t, xs[root])
            t = xs[RANK].to(DEV)
            dist.reduce(t, dst=root, op=dist.ReduceOp.SUM)
            if RANK == root:
                check(f"reduce {dtype} to {root}", t, reduce_ref(xs, "sum", dtype))
    return test


def test_all_to_all(test):
    for dtype in (torch.float32, torch.int32):
        n = 129
        xs = inputs(test, WORLD * n, dtype)
        test += 1
        out = torch.empty(WORLD * n, dtype=dtype, device=DEV)
        dist.all_to_all_single(out, xs[RANK].to(DEV))
        want = torch.cat([xs[q][RANK * n : (RANK + 1) * n] for q in range(WORLD)])
        check(f"all_to_all_single equal {dtype}", out, want)
        # Unequal splits: rank q sends (q + d + 1) elements to rank d.
        size = lambda q, d: q + 2 * d + 1
        xs = [inputs(test, sum(size(q, d) for d in range(WORLD)), dtype)[q] for q in range(WORLD)]
        test += 1
        in_splits = [size(RANK, d) for d in range(WORLD)]
        out_splits = [size(q, RANK) for q in range(WORLD)]
        out = torch.empty(sum(out_splits), dtype=dtype, device=DEV)
        dist.all_to_all_single(out, xs[RANK].to(DEV), out_splits, in_splits)
        pieces = []
        for q in range(WORLD):
            start = sum(size(q, d) for d in range(RANK))
            pieces.append(xs[q][start : start + size(q, RANK)])
        check(f"all_to_all_single unequal {dtype}", out, torch.cat(pieces))
    return test


def test_p2p(test):
    if WORLD < 2:
        return test
    n = 1000
    xs = inputs(test, n, torch.float32)
    test += 1
    # send / recv between pairs (0 -> 1, 2 -> 3, ...).
    if RANK % 2 == 0 and RANK + 1 < WORLD:
        dist.send(xs[RANK].to(DEV), dst=RANK + 1)
    elif RANK % 2 == 1:
        t = torch.empty(n, device=DEV)
        dist.recv(t, src=RANK - 1)
        check("send/recv", t, xs[RANK - 1])
    # batch_isend_irecv: a ring in both directions at once.
    right, left = (RANK + 1) % WORLD, (RANK - 1) % WORLD
    a, b = torch.empty(n, device=DEV), torch.empty(n, device=DEV)
    ops = [
        dist.P2POp(dist.isend, xs[RANK].to(DEV), right),
        dist.P2POp(dist.isend, xs[RANK].to(DEV), left),
        dist.P2POp(dist.irecv, a, left),
        dist.P2POp(dist.irecv, b, right),
    ]
    for r in dist.batch_isend_irecv(ops):
        r.wait()
    check("batch_isend_irecv from the left", a, xs[left])
    check("batch_isend_irecv from the right", b, xs[right])
    return test


def test_graphs(test):
    """Collectives captured once in a CUDA graph, replayed with new inputs."""
    n = 2049
    ar = torch.zeros(n, device=DEV)
    ag_in, ag_out = torch.zeros(n, device=DEV), torch.zeros(WORLD * n, device=DEV)
    rs_in, rs_out = torch.zeros(WORLD * n, device=DEV, dtype=torch.bfloat16), torch.zeros(n, device=DEV, dtype=torch.bfloat16)
    bc = torch.zeros(n, device=DEV, dtype=torch.int32)
    a2a_in, a2a_out = torch.zeros(WORLD * n, device=DEV), torch.zeros(WORLD * n, device=DEV)
    mx = torch.zeros(n, device=DEV, dtype=torch.float16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture, as PyTorch recommends
        dist.all_reduce(ar)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        dist.all_reduce(ar)
        dist.all_gather_into_tensor(ag_out, ag_in)
        dist.reduce_scatter_tensor(rs_out, rs_in)
        dist.broadcast(bc, src=WORLD - 1)
        dist.all_to_all_single(a2a_out, a2a_in)
        dist.all_reduce(mx, op=dist.ReduceOp.MAX)
    for replay in range(3):
        xs = inputs(test, n, torch.float32)
        ys = inputs(test + 1, WORLD * n, torch.bfloat16)
        zs = inputs(test + 2, n, torch.int32)
        ws = inputs(test + 3, WORLD * n, torch.float32)
        vs = inputs(test + 4, n, torch.float16)
        test += 5
        ar.copy_(xs[RANK].to(DEV))
        ag_in.copy_(xs[RANK].to(DEV))
        rs_in.copy_(ys[RANK].to(DEV))
        bc.copy_(zs[RANK].to(DEV))
        a2a_in.copy_(ws[RANK].to(DEV))
        mx.copy_(vs[RANK].to(DEV))
        g.replay()
        torch.cuda.synchronize()
        check(f"graph replay {replay}: all_reduce", ar, reduce_ref(xs, "sum", torch.float32))
        check(f"graph replay {replay}: all_gather_into_tensor", ag_out, torch.cat(xs))
        want = reduce_ref([y[RANK * n : (RANK + 1) * n] for y in ys], "sum", torch.bfloat16)
        check(f"graph replay {replay}: reduce_scatter_tensor", rs_out, want)
        check(f"graph replay {replay}: broadcast", bc, zs[WORLD - 1])
        want = torch.cat([ws[q][RANK * n : (RANK + 1) * n] for q in range(WORLD)])
        check(f"graph replay {replay}: all_to_all_single", a2a_out, want)
        check(f"graph replay {replay}: all_reduce max", mx, reduce_ref(vs, "max", torch.float16))
    return test


def main():
    lib, version = library()
    dist.init_process_group("nccl", rank=RANK, world_size=WORLD)
    test = 1
    test = test_all_reduce(test)
    test = test_gathers(test)
    test = test_rooted(test)
    test = test_all_to_all(test)
    test = test_p2p(test)
    dist.barrier()
    test = test_graphs(test)
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()
    served, forwarded = ctypes.c_uint64(), ctypes.c_uint64()
    lib.mscclppNcclStats(ctypes.byref(served), ctypes.byref(forwarded))
    print(
        f"torch_nccl: rank {RANK} of {WORLD} on {DEV} ({version}, torch {torch.__version__}): "
        f"{CHECKS} checks passed; calls served {served.value}, forwarded {forwarded.value}",
        flush=True,
    )
    if forwarded.value != 0:
        sys.exit(f"torch_nccl: rank {RANK}: {forwarded.value} calls were forwarded; all are listed as served")
    dist.destroy_process_group()
    print(f"torch_nccl: rank {RANK}: RESULT ok", flush=True)


if __name__ == "__main__":
    main()
