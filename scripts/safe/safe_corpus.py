#!/usr/bin/env python3
"""The safe-mask corpus (docs/safe-masks.md): launches that hang on a badly
shaped TPC set, run under many sets, compared bit for bit.

    safe_corpus.py ref OUT.json --lib LIB          every case without a set: the reference digests
    safe_corpus.py sweep REF.json SETS OUT.jsonl --lib LIB [--skip N] [--set-timeout S]
                                                   under `lithos run`: for each line of SETS (a TPC
                                                   set), confine the process to it (lithos_set_process_tpcs),
                                                   run every case, compare with REF; one JSON line per set

Cases: own kernels (scripts/safe/safe_kernels.cu: clusters of 1-16 CTAs with
distributed shared memory, one block per SM and several; a compile-time
cluster; cooperative grids sized by occupancy x SM count, launched three
ways, one of them from a CUDA graph), cuBLAS GEMMs (nvjet cluster kernels on
Hopper), cuBLASLt with a bias, cuDNN convolutions forward and backward, and
cuDNN batch norm. A set that hangs is found by a watchdog thread, which
writes {"set": ..., "result": "hung"} and exits; the caller resumes with
--skip.
"""
import argparse
import ctypes
import hashlib
import json
import os
import sys
import threading
import time

import torch
import torch.nn.functional as F

CUDA_CASES = [("cluster1", ("c", 1, 1)), ("cluster2", ("c", 2, 1)), ("cluster4", ("c", 4, 1)),
              ("cluster8", ("c", 8, 1)), ("cluster16", ("c", 16, 1)), ("cluster4_shared_sm", ("c", 4, 0)),
              ("cluster8_shared_sm", ("c", 8, 0)), ("cluster_static4", ("s",)), ("coop_launch", ("k", 0)),
              ("coop_attr", ("k", 1)), ("coop_graph", ("k", 2))]


def digest(t):
    t = t.detach().contiguous().cpu()
    return hashlib.sha256(t.reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()[:16]


def cuda_cases(lib):
    out = {}
    for name, spec in CUDA_CASES:
        d = ctypes.c_ulonglong(0)
        if spec[0] == "c":
            rc = lib.safe_cluster(spec[1], spec[2], ctypes.byref(d))
        elif spec[0] == "s":
            rc = lib.safe_cluster_static(ctypes.byref(d))
        else:
            rc = lib.safe_coop(spec[1], ctypes.byref(d))
        out[name] = f"{d.value:016x}" if rc == 0 else f"error {rc}"
    return out


def torch_cases(dev):
    out = {}
    g = torch.Generator(device=dev).manual_seed(1)

    def rnd(*shape, dtype=torch.float32):
        return torch.randn(*shape, device=dev, generator=g, dtype=dtype)

    for m, n, k in ((4096, 4096, 4096), (1024, 3072, 768), (8192, 1024, 2048), (333, 777, 555)):
        a, b = rnd(m, k, dtype=torch.bfloat16), rnd(k, n, dtype=torch.bfloat16)
        out[f"gemm_bf16_{m}x{n}x{k}"] = digest(a @ b)
    a, b = rnd(2048, 2048, dtype=torch.float16), rnd(2048, 2048, dtype=torch.float16)
    out["gemm_fp16"] = digest(a @ b)
    a, b = rnd(1024, 2048), rnd(2048, 1536)
    out["gemm_fp32"] = digest(a @ b)
    w, bias = rnd(3072, 1024, dtype=torch.bfloat16), rnd(3072, dtype=torch.bfloat16)
    out["linear_bias_cublaslt"] = digest(F.linear(rnd(512, 1024, dtype=torch.bfloat16), w, bias))
    out["bmm_bf16"] = digest(torch.bmm(rnd(16, 256, 512, dtype=torch.bfloat16), rnd(16, 512, 256, dtype=torch.bfloat16)))
    x = rnd(16, 64, 56, 56, dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last).requires_grad_()
    wc = rnd(128, 64, 3, 3, dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last).requires_grad_()
    y = F.conv2d(x, wc, padding=1)
    out["conv_bf16_fwd"] = digest(y)
    gx, gw = torch.autograd.grad(y.float().square().mean(), (x, wc))
    out["conv_bf16_dgrad"] = digest(gx)
    out["conv_bf16_wgrad"] = digest(gw)
    x32 = rnd(8, 64, 56, 56)
    out["conv_fp32"] = digest(F.conv2d(x32, rnd(64, 64, 3, 3), padding=1))
    bn = torch.nn.BatchNorm2d(64).to(dev).train()
    out["batchnorm_train"] = digest(bn(x32))
    return out


def run_all(lib, dev):
    out = cuda_cases(lib)
    out.update(torch_cases(dev))
    torch.cuda.synchronize()
    return out


def setup():
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)


def cmd_ref(args):
    setup()
    lib = ctypes.CDLL(args.lib)
    dev = torch.device("cuda")
    run_all(lib, dev)  # warm-up: module loads, cuBLAS handles
    ref = run_all(lib, dev)
    again = run_all(lib, dev)
    unstable = sorted(k for k in ref if ref[k] != again.get(k))
    with open(args.out, "w") as f:
        json.dump({"digests": ref, "unstable": unstable}, f, indent=1)
    print(json.dumps({"cases": len(ref), "unstable": unstable, "errors": [k for k, v in ref.items() if "error" in v]}))


def words_of(text):
    lo = hi = 0
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        a, _, b = part.partition("-")
        for t in range(int(a), int(b or a) + 1):
            if t < 64:
                lo |= 1 << t
            else:
                hi |= 1 << (t - 64)
    return (ctypes.c_uint64 * 2)(lo, hi)


def cmd_sweep(args):
    setup()
    lib = ctypes.CDLL(args.lib)
    lithos = ctypes.CDLL(None)
    set_tpcs = lithos.lithos_set_process_tpcs
    set_tpcs.argtypes = [ctypes.POINTER(ctypes.c_uint64)]
    stats_json = lithos.lithos_stats_json
    stats_json.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    ref = json.load(open(args.ref))
    digests, unstable = ref["digests"], set(ref["unstable"])
    sets = [l.split("#")[0].strip() for l in open(args.sets)]
    sets = [s for s in sets if s]
    dev = torch.device("cuda")
    out = open(args.out, "a")
    current = {"set": None, "t0": time.time()}

    def watchdog():
        while True:
            time.sleep(0.5)
            if current["set"] is not None and time.time() - current["t0"] > args.set_timeout:
                out.write(json.dumps({"index": current["index"], "set": current["set"], "result": "hung",
                                      "case": current.get("case")}) + "\n")
                out.flush()
                os._exit(3)

    threading.Thread(target=watchdog, daemon=True).start()
    # Warm up on the whole GPU: module loads and handles are not per set.
    run_all(lib, dev)

    def safe_stats():
        buf = ctypes.create_string_buffer(1 << 16)
        stats_json(buf, len(buf))
        return json.loads(buf.value.decode()).get("safe", {})

    for i, s in enumerate(sets):
        if i < args.skip:
            continue
        rc = set_tpcs(words_of(s))
        before = safe_stats()
        current.update(set=s, index=i, t0=time.time(), case=None)
        got = run_all(lib, dev)
        dt = time.time() - current["t0"]
        current["set"] = None
        after = safe_stats()
        wrong = sorted(k for k, v in got.items() if k not in unstable and v != digests.get(k))
        errors = sorted(k for k, v in got.items() if "error" in v)
        rec = {"index": i, "set": s, "tpcs": sum(bin(w).count("1") for w in words_of(s)), "api_rc": rc,
               "result": "ok" if not wrong and not errors else "wrong", "wrong": wrong, "errors": errors,
               "seconds": round(dt, 3), "safe": {k: after.get(k, 0) - before.get(k, 0) for k in after}}
        out.write(json.dumps(rec) + "\n")
        out.flush()
    set_tpcs(None)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("ref")
    r.add_argument("out")
    r.add_argument("--lib", required=True)
    w = sub.add_parser("sweep")
    w.add_argument("ref")
    w.add_argument("sets")
    w.add_argument("out")
    w.add_argument("--lib", required=True)
    w.add_argument("--skip", type=int, default=0)
    w.add_argument("--set-timeout", type=float, default=20)
    args = ap.parse_args()
    {"ref": cmd_ref, "sweep": cmd_sweep}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
