#!/usr/bin/env python3
"""A process with two CUDA contexts on one GPU: PyTorch's (the primary
context) and one the program creates through the driver API (cuCtxCreate),
as a PyCUDA-style library beside PyTorch does. Run by
scripts/daemon/gpu-contexts.sh plainly and under lithosd; prints one JSON
line whose results must equal the plain run's.

  contexts_check.py primary-first   torch launches first (the daemon client
                                    registers in the primary context), then
                                    the created context's launches, then
                                    torch again, then the created context is
                                    destroyed and torch launches once more
  contexts_check.py created-first   the created context's launches first (the
                                    client registers there), the context is
                                    destroyed, then torch launches

The created context's kernel adds 1 to every float of a buffer, 200 times
on one stream (a PTX module loaded with cuModuleLoadData). Every driver
call's result is checked; the first that fails is named.
"""
import ctypes
import json
import sys

PTX = rb"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry add1(.param .u64 p, .param .u32 n)
{
  .reg .b32 %r<6>;
  .reg .b64 %rd<4>;
  .reg .pred %p1;
  .reg .f32 %f<3>;
  ld.param.u64 %rd1, [p];
  ld.param.u32 %r1, [n];
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mad.lo.s32 %r5, %r2, %r3, %r4;
  setp.ge.u32 %p1, %r5, %r1;
  @%p1 bra DONE;
  cvta.to.global.u64 %rd2, %rd1;
  mul.wide.u32 %rd3, %r5, 4;
  add.s64 %rd2, %rd2, %rd3;
  ld.global.f32 %f1, [%rd2];
  add.f32 %f2, %f1, 0f3F800000;
  st.global.f32 [%rd2], %f2;
DONE:
  ret;
}
"""

N = 1 << 20
LAUNCHES = 200


class Failed(Exception):
    pass


def check(r, what):
    if r != 0:
        raise Failed(f"{what} returned {r}")


def created_context_work(cu):
    """Creates a context, runs the kernel in it; returns (ctx, sum of the buffer)."""
    ctx = ctypes.c_void_p()
    if hasattr(cu, "cuCtxCreate_v4"):
        check(cu.cuCtxCreate_v4(ctypes.byref(ctx), None, 0, 0), "cuCtxCreate_v4")
    else:
        check(cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, 0), "cuCtxCreate_v2")
    mod, fn, buf, stream = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_uint64(), ctypes.c_void_p()
    check(cu.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(PTX)), "cuModuleLoadData")
    check(cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"add1"), "cuModuleGetFunction")
    check(cu.cuMemAlloc_v2(ctypes.byref(buf), ctypes.c_size_t(N * 4)), "cuMemAlloc")
    check(cu.cuMemsetD32_v2(buf, ctypes.c_uint(0), ctypes.c_size_t(N)), "cuMemsetD32")
    check(cu.cuStreamCreate(ctypes.byref(stream), 1), "cuStreamCreate")
    p = ctypes.c_uint64(buf.value)
    n = ctypes.c_uint32(N)
    params = (ctypes.c_void_p * 2)(ctypes.cast(ctypes.byref(p), ctypes.c_void_p),
                                   ctypes.cast(ctypes.byref(n), ctypes.c_void_p))
    for _ in range(LAUNCHES):
        check(cu.cuLaunchKernel(fn, N // 256, 1, 1, 256, 1, 1, 0, stream, params, None), "cuLaunchKernel")
    check(cu.cuStreamSynchronize(stream), "cuStreamSynchronize")
    host = (ctypes.c_float * N)()
    check(cu.cuMemcpyDtoH_v2(host, buf, ctypes.c_size_t(N * 4)), "cuMemcpyDtoH")
    total = float(sum(host[i] for i in range(0, N, 4096)))
    check(cu.cuStreamDestroy_v2(stream), "cuStreamDestroy")
    check(cu.cuMemFree_v2(buf), "cuMemFree")
    check(cu.cuModuleUnload(mod), "cuModuleUnload")
    return ctx, total


def torch_work(torch, a, k):
    return float((a * k).sum().item())


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in ("primary-first", "created-first"):
        print(__doc__, file=sys.stderr)
        return 2
    import torch
    cu = ctypes.CDLL("libcuda.so.1")
    out = {"shape": sys.argv[1], "torch": [], "created": None, "failed": None}
    try:
        check(cu.cuInit(0), "cuInit")
        if sys.argv[1] == "primary-first":
            a = torch.ones(N, device="cuda")
            out["torch"].append(torch_work(torch, a, 3))
            ctx, out["created"] = created_context_work(cu)
            prev = ctypes.c_void_p()
            check(cu.cuCtxPopCurrent_v2(ctypes.byref(prev)), "cuCtxPopCurrent")
            out["torch"].append(torch_work(torch, a, 5))
            check(cu.cuCtxDestroy_v2(ctx), "cuCtxDestroy")
            out["torch"].append(torch_work(torch, a, 7))
        else:
            ctx, out["created"] = created_context_work(cu)
            prev = ctypes.c_void_p()
            check(cu.cuCtxPopCurrent_v2(ctypes.byref(prev)), "cuCtxPopCurrent")
            check(cu.cuCtxDestroy_v2(ctx), "cuCtxDestroy")
            a = torch.ones(N, device="cuda")
            for k in (3, 5, 7):
                out["torch"].append(torch_work(torch, a, k))
        torch.cuda.synchronize()
    except Failed as e:
        out["failed"] = str(e)
    except RuntimeError as e:
        out["failed"] = "torch: " + str(e).splitlines()[0]
    print(json.dumps(out), flush=True)
    return 0 if out["failed"] is None else 1


if __name__ == "__main__":
    sys.exit(main())
