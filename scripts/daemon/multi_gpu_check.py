#!/usr/bin/env python3
"""Programs of a node with several GPUs, run plainly and under lithos
(scripts/daemon/gpu-multi.sh). Each prints one JSON line; the shapes that
compute print checksums that must equal the plain run's bit for bit.

  multi_gpu_check.py one DEVICE   a small MLP's training steps on cuda:DEVICE
  multi_gpu_check.py both         the same on cuda:0 and on cuda:1 in turn
                                  (first launch on cuda:0)
  multi_gpu_check.py ddp          one rank of a torchrun job (LOCAL_RANK's
                                  GPU): training steps, then all_reduce
  multi_gpu_check.py smid DEVICE  the SMs that 4096 blocks of a kernel ran on
                                  (CuPy RawKernel reading %smid; the first
                                  launch of the process is on DEVICE)
  multi_gpu_check.py smid-both    the same on cuda:0, then on cuda:1, in one
                                  process: {"sms": [on 0, on 1]}
  multi_gpu_check.py smid-api     sets given through lithos.h (under
                                  `lithos run`): the process set TPCs 0-3 on
                                  both GPUs, then a stream set TPCs 10-11 on
                                  a stream of cuda:1 (its SM ids must be
                                  20-23); the default stream of cuda:1 after
                                  it keeps the process set
"""
import json
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def _checksum(t):
    t = t.double()
    return [float(t.sum().item()), float(t.abs().sum().item())]


def _train(torch, dev, seed, steps=30):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 256, generator=g).to(dev)
    y = torch.randn(64, 256, generator=g).to(dev)
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    torch.cuda.synchronize(dev)
    return _checksum(model[0].weight)


def one(dev_index):
    import torch
    torch.use_deterministic_algorithms(True)
    torch.cuda.set_device(dev_index)
    return {"device": dev_index, "uuid": str(torch.cuda.get_device_properties(dev_index).uuid),
            "weights": _train(torch, f"cuda:{dev_index}", 1)}


def both():
    import torch
    torch.use_deterministic_algorithms(True)
    out = {}
    for round_ in range(2):
        for d in (0, 1):
            out[f"cuda:{d}/{round_}"] = _train(torch, f"cuda:{d}", 10 + d, steps=10)
    return out


def ddp():
    import torch
    import torch.distributed as dist
    torch.use_deterministic_algorithms(True)
    rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
    w = _train(torch, f"cuda:{rank}", 100 + rank)
    t = torch.tensor(w, dtype=torch.float64, device=f"cuda:{rank}")
    dist.all_reduce(t)
    dist.barrier()
    result = {"rank": rank, "weights": w, "sum_over_ranks": [float(v) for v in t.tolist()]}
    dist.destroy_process_group()
    return result


SMID_SRC = r'''
extern "C" __global__ void smid(unsigned int* out, long long spin) {
  unsigned int s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  long long t0 = clock64();
  while (clock64() - t0 < spin) {}
  if (threadIdx.x == 0) out[blockIdx.x] = s;
}
'''


def smid(dev_index, stream=None):
    import cupy
    with cupy.cuda.Device(dev_index):
        k = cupy.RawKernel(SMID_SRC, "smid")
        blocks = 4096
        out = cupy.zeros(blocks, dtype=cupy.uint32)
        if stream is None:
            k((blocks,), (128,), (out, cupy.int64(20000)))
        else:
            k((blocks,), (128,), (out, cupy.int64(20000)), stream=stream)
        cupy.cuda.Device(dev_index).synchronize()
        sms = sorted(set(int(v) for v in out.get()))
    return {"device": dev_index, "sms": len(sms), "sm_ids": sms}


def smid_api():
    import ctypes
    import cupy
    lib = ctypes.CDLL(None)  # liblithos.so, preloaded by `lithos run`
    words = ctypes.c_uint64 * 2
    set_process = lib.lithos_set_process_tpcs
    set_stream = lib.lithos_stream_set_tpcs
    set_stream.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64)]
    rc_process = set_process(words(0xF, 0))  # TPCs 0-3: SMs 0-7
    process = [smid(0), smid(1)]
    with cupy.cuda.Device(1):
        s = cupy.cuda.Stream(non_blocking=True)
    rc_stream = set_stream(ctypes.c_void_p(s.ptr), words((1 << 10) | (1 << 11), 0))  # SMs 20-23
    on_stream = smid(1, s)
    after = smid(1)
    return {"rc": [rc_process, rc_stream], "process_set": [p["sm_ids"] for p in process],
            "stream_set_gpu1": on_stream["sm_ids"], "default_stream_gpu1": after["sm_ids"]}


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("one", "both", "ddp", "smid", "smid-both", "smid-api"):
        print(__doc__, file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    shape = sys.argv[1]
    if shape in ("one", "smid"):
        if len(sys.argv) != 3:
            print(f"usage: multi_gpu_check.py {shape} DEVICE", file=sys.stderr)
            return 2
        result = (one if shape == "one" else smid)(int(sys.argv[2]))
    elif shape == "smid-both":
        result = {"sms": [smid(0)["sms"], smid(1)["sms"]]}
    elif shape == "smid-api":
        result = smid_api()
    else:
        result = both() if shape == "both" else ddp()
    result["seconds"] = round(time.perf_counter() - t0, 3)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
