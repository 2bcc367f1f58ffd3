#!/usr/bin/env python3
"""Correctness corpus of the kernel atomizer (docs/atomizer.md).

    corpus.py run OUT.pt --kernels DIR    run every case, save the outputs
    corpus.py compare BASE.pt OTHER.pt    bit-for-bit comparison, a table, exit 1 on a difference

Run it once without lithos and once per atom count under
`lithos run --atomize` with LITHOS_ATOMS=N (scripts/atom/gpu-atom.sh does),
then compare. Every case is deterministic (fixed seeds, deterministic
algorithms), so any difference is the atomizer's.

Cases: PyTorch convolution (cuDNN), GEMM through cuBLAS and cuBLASLt (bias
epilogue), scaled-dot-product attention (flash), layer norm, softmax,
embedding, reductions, batch norm (cuDNN), Triton kernels (2-D and 3-D
grids, a matmul with multi-stage shared memory), ResNet-50 and BERT forward
and backward, a model captured in a CUDA graph, and driver-API kernels from
corpus_kernels.cu (1-D/2-D/3-D grids, grid-stride loop, dynamic shared
memory, mixed parameters) loaded as cubin, compressed fatbin, PTX and file,
launched with kernelParams, with an `extra` buffer and with cuLaunchKernelEx.
"""
import argparse
import ctypes
import hashlib
import os
import struct
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))


def digest(t):
    """A tensor's bytes as sha256 (big tensors) or the tensor itself."""
    t = t.detach().contiguous().cpu()
    if t.numel() <= 4096:
        return t.clone()
    return hashlib.sha256(t.reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()


# --- PyTorch cases ---------------------------------------------------------------

def torch_cases(dev):
    out = {}
    g = torch.Generator(device=dev).manual_seed(1)

    def rnd(*shape, dtype=torch.float32):
        return torch.randn(*shape, device=dev, generator=g, dtype=dtype)

    x = rnd(8, 64, 56, 56)
    w = rnd(128, 64, 3, 3)
    out["conv2d_cudnn"] = digest(F.conv2d(x, w, padding=1))
    out["conv2d_bf16_cl"] = digest(F.conv2d(x.to(torch.bfloat16).contiguous(memory_format=torch.channels_last),
                                            w.to(torch.bfloat16), padding=1))
    a, b = rnd(1024, 2048), rnd(2048, 1536)
    out["gemm_fp32_cublas"] = digest(a @ b)
    ab, bb = a.to(torch.bfloat16), b.to(torch.bfloat16)
    out["gemm_bf16_cublas"] = digest(ab @ bb)
    bias = rnd(1536, dtype=torch.bfloat16)
    out["addmm_bias_cublaslt"] = digest(torch.addmm(bias, ab, bb))
    out["bmm_bf16"] = digest(torch.bmm(rnd(16, 256, 512, dtype=torch.bfloat16), rnd(16, 512, 256, dtype=torch.bfloat16)))
    q, k, v = (rnd(4, 16, 1024, 64, dtype=torch.bfloat16) for _ in range(3))
    out["sdpa_flash"] = digest(F.scaled_dot_product_attention(q, k, v, is_causal=True))
    out["sdpa_math"] = digest(F.scaled_dot_product_attention(q.float(), k.float(), v.float()))
    h = rnd(4096, 1024)
    out["layer_norm"] = digest(F.layer_norm(h, (1024,)))
    out["softmax"] = digest(torch.softmax(h, dim=-1))
    emb = rnd(30522, 768)
    ids = torch.randint(0, 30522, (64, 128), device=dev, generator=g)
    out["embedding"] = digest(F.embedding(ids, emb))
    big = rnd(1 << 24)
    out["sum"] = digest(big.sum())
    out["max"] = digest(big.max())
    out["cumsum_rows"] = digest(h.cumsum(dim=1))
    out["topk"] = digest(torch.topk(h, 8, dim=1).values)
    bn = torch.nn.BatchNorm2d(64).to(dev)
    out["batchnorm_cudnn"] = digest(bn(x))
    return out


# --- Triton ----------------------------------------------------------------------

def triton_cases(dev):
    import triton
    import triton.language as tl

    @triton.jit
    def k2d(out_ptr, W, BLOCK: tl.constexpr):
        px, py = tl.program_id(0), tl.program_id(1)
        offs = px * BLOCK + tl.arange(0, BLOCK)
        vals = offs.to(tl.float32) * 0.5 + py.to(tl.float32) * 1000.0 + tl.num_programs(0).to(tl.float32)
        tl.store(out_ptr + py * W + offs, vals)

    @triton.jit
    def k3d(out_ptr):
        px, py, pz = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        nx, ny = tl.num_programs(0), tl.num_programs(1)
        lin = px + nx * (py + ny * pz)
        cur = tl.load(out_ptr + lin)
        tl.store(out_ptr + lin, cur + lin + 1)

    @triton.jit
    def matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pm, pn = tl.program_id(0), tl.program_id(1)
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :])
            b = tl.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :])
            acc += tl.dot(a, b)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)

    out = {}
    W, H, BLOCK = 4096, 64, 256
    o = torch.zeros(H * W, device=dev)
    k2d[(W // BLOCK, H)](o, W, BLOCK=BLOCK)
    out["triton_2d"] = digest(o)
    o3 = torch.zeros(16 * 8 * 6, device=dev)
    k3d[(16, 8, 6)](o3)
    out["triton_3d"] = digest(o3)
    g = torch.Generator(device=dev).manual_seed(2)
    M = N = K = 1024
    a = torch.randn(M, K, device=dev, generator=g, dtype=torch.float16)
    b = torch.randn(K, N, device=dev, generator=g, dtype=torch.float16)
    c = torch.empty(M, N, device=dev, dtype=torch.float32)
    matmul[(M // 128, N // 128)](a, b, c, M, N, K, BM=128, BN=128, BK=64, num_stages=3, num_warps=8)
    out["triton_matmul_smem"] = digest(c)
    return out


# --- Models ----------------------------------------------------------------------

def model_cases(dev):
    import workloads  # scripts/bench/workloads.py

    out = {}
    for name, params in (("resnet50", {"batch": 8}), ("bert-base", {"batch": 4, "seq": 128})):
        torch.manual_seed(3)
        model, loss_fn = workloads._training_model(name, params, dev)
        model.zero_grad(set_to_none=True)
        loss = loss_fn()
        loss.backward()
        out[f"{name}_train_loss"] = digest(loss)
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        out[f"{name}_train_grads"] = digest(torch.cat([t.flatten() for t in grads]))
    # A model captured in a CUDA graph: BERT-base inference.
    torch.manual_seed(4)
    model, fn = workloads._inference_model("bert-base", {"batch": 4, "seq": 128}, dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = fn()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    out["bert_cuda_graph"] = digest(y)
    return out


# --- Driver API ------------------------------------------------------------------

class Driver:
    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")

    def __call__(self, name, *args):
        r = getattr(self.lib, name)(*args)
        if r != 0:
            raise RuntimeError(f"{name} failed: CUresult {r}")


def driver_cases(dev, kdir):
    cu = Driver()
    torch.cuda.synchronize()
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    out = {}
    images = {}
    for kind, fname in (("cubin", "corpus_kernels.cubin"), ("fatbin_zstd", "corpus_kernels.fatbin"),
                        ("ptx", "corpus_kernels.ptx")):
        path = os.path.join(kdir, fname)
        if os.path.exists(path):
            data = open(path, "rb").read()
            images[kind] = data + (b"\0" if kind == "ptx" else b"")
    loaded = []
    for kind, data in images.items():
        mod = ctypes.c_void_p()
        buf = ctypes.create_string_buffer(data, len(data))
        if kind == "fatbin_zstd":
            cu("cuModuleLoadFatBinary", ctypes.byref(mod), buf)
        elif kind == "ptx":
            cu("cuModuleLoadDataEx", ctypes.byref(mod), buf, 0, None, None)
        else:
            cu("cuModuleLoadData", ctypes.byref(mod), buf)
        loaded.append((kind, mod, buf))
    mod = ctypes.c_void_p()
    cu("cuModuleLoad", ctypes.byref(mod), os.path.join(kdir, "corpus_kernels.cubin").encode())
    loaded.append(("file", mod, None))
    lib = ctypes.c_void_p()
    lbuf = ctypes.create_string_buffer(images["fatbin_zstd"], len(images["fatbin_zstd"]))
    cu("cuLibraryLoadData", ctypes.byref(lib), lbuf, None, None, 0, None, None, 0)

    def func(mod, name):
        f = ctypes.c_void_p()
        cu("cuModuleGetFunction", ctypes.byref(f), mod, name.encode())
        return f

    def launch(f, grid, block, args, smem=0, via="params"):
        holders = [ctypes.c_uint64(a.data_ptr()) if isinstance(a, torch.Tensor) else a for a in args]
        if via == "extra":
            # Pack the arguments at their natural alignment.
            blob = b""
            for h in holders:
                size = ctypes.sizeof(h)
                align = min(size, 8)
                blob += b"\0" * ((-len(blob)) % align) + bytes(h)
            pbuf = ctypes.create_string_buffer(blob, len(blob))
            size = ctypes.c_size_t(len(blob))
            extra = (ctypes.c_void_p * 5)(1, ctypes.cast(pbuf, ctypes.c_void_p), 2,
                                          ctypes.cast(ctypes.pointer(size), ctypes.c_void_p), 0)
            cu("cuLaunchKernel", f, *grid, *block, smem, stream, None, extra)
            return
        params = (ctypes.c_void_p * len(holders))(*[ctypes.cast(ctypes.pointer(h), ctypes.c_void_p) for h in holders])
        if via == "ex":
            class Config(ctypes.Structure):
                _fields_ = [("gx", ctypes.c_uint), ("gy", ctypes.c_uint), ("gz", ctypes.c_uint),
                            ("bx", ctypes.c_uint), ("by", ctypes.c_uint), ("bz", ctypes.c_uint),
                            ("smem", ctypes.c_uint), ("stream", ctypes.c_void_p), ("attrs", ctypes.c_void_p),
                            ("nattrs", ctypes.c_uint)]
            cfg = Config(*grid, *block, smem, stream, None, 0)
            cu("cuLaunchKernelEx", ctypes.byref(cfg), f, params, None)
            return
        cu("cuLaunchKernel", f, *grid, *block, smem, stream, params, None)

    g = torch.Generator(device=dev).manual_seed(5)
    handles = [(kind, lambda name, m=mod: func(m, name)) for kind, mod, _ in loaded]

    def lib_kernel(name):
        k = ctypes.c_void_p()
        cu("cuLibraryGetKernel", ctypes.byref(k), lib, name.encode())
        return k
    handles.append(("library", lib_kernel))

    for kind, get in handles:
        for grid in ((1000, 1, 1), (37, 29, 1), (13, 7, 5)):
            ids = torch.zeros(8 * grid[0] * grid[1] * grid[2], dtype=torch.int32, device=dev)
            launch(get("block_ids"), grid, (64, 1, 1), [ids])
            out[f"{kind}_block_ids_{grid[0]}x{grid[1]}x{grid[2]}"] = digest(ids)
        n = 1 << 22
        x = torch.randn(n, device=dev, generator=g)
        for via in ("params", "extra", "ex"):
            y = torch.ones(n, device=dev)
            launch(get("saxpy_stride"), (264, 1, 1), (256, 1, 1), [y, x, ctypes.c_float(2.5), ctypes.c_int(n)], via=via)
            out[f"{kind}_saxpy_stride_{via}"] = digest(y)
        s = torch.zeros(n // 512, device=dev)
        launch(get("block_sum_dyn"), (n // 512, 1, 1), (512, 1, 1), [s, x, ctypes.c_int(n)], smem=512 * 4)
        out[f"{kind}_block_sum_dyn"] = digest(s)
        mixed = struct.pack("<dicxxxfff", 1.5, 7, b"\x03", 0.25, 0.5, 0.75)
        mixed += b"\0" * ((-len(mixed)) % 8)
        m = (ctypes.c_char * len(mixed)).from_buffer_copy(mixed)
        W, H = 512, 96
        o = torch.zeros(W * H, device=dev)
        inp = torch.randn(W * H, device=dev, generator=g)
        launch(get("many_params"), (W // 32, H // 8, 1), (32, 8, 1),
               [o, m, ctypes.c_char(b"\x05"), ctypes.c_short(-3), ctypes.c_longlong(1 << 40), ctypes.c_double(0.125),
                ctypes.c_float(1.75), ctypes.c_int(W), inp])
        out[f"{kind}_many_params_2d"] = digest(o)
    torch.cuda.synchronize()
    return out


def cmd_run(args):
    dev = torch.device("cuda")
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True)
    results = {}
    for name, fn in (("torch", torch_cases), ("triton", triton_cases), ("models", model_cases),
                     ("driver", lambda d: driver_cases(d, args.kernels))):
        print(f"corpus: {name} ...", file=sys.stderr, flush=True)
        results.update(fn(dev))
    torch.cuda.synchronize()
    lib = ctypes.CDLL(None)
    try:
        report = lib.lithos_atom_report
    except AttributeError:
        report = None
    if report is not None and args.report:
        report.argtypes = [ctypes.c_char_p]
        report(args.report.encode())
    torch.save(results, args.out)
    print(f"corpus: {len(results)} outputs -> {args.out}", file=sys.stderr)
    return 0


def cmd_compare(args):
    base = torch.load(args.base, weights_only=False)
    other = torch.load(args.other, weights_only=False)
    bad = 0
    for name in sorted(base):
        a, b = base[name], other.get(name)
        if isinstance(a, torch.Tensor):
            same = isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(
                a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
        else:
            same = a == b
        if not same:
            bad += 1
            print(f"DIFFERENT {name}")
    missing = sorted(set(base) ^ set(other))
    for name in missing:
        print(f"MISSING {name}")
    print(f"compare {os.path.basename(args.other)}: {len(base) - bad}/{len(base)} bit-identical, "
          f"{bad} different, {len(missing)} missing")
    return 1 if bad or missing else 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run every case and save the outputs")
    r.add_argument("out")
    r.add_argument("--kernels", required=True, help="directory with corpus_kernels.{cubin,fatbin,ptx}")
    r.add_argument("--report", help="write lithos's atomizer report here (when loaded)")
    c = sub.add_parser("compare", help="compare two saved runs bit for bit")
    c.add_argument("base")
    c.add_argument("other")
    args = p.parse_args()
    return cmd_run(args) if args.cmd == "run" else cmd_compare(args)


if __name__ == "__main__":
    sys.exit(main())
