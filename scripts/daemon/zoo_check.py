#!/usr/bin/env python3
"""Shapes of real programs that the bench tenants do not have, run plainly
and under lithos (gpu-daemon.sh, phase "zoo"): each must exit 0, in time,
and print the same JSON line as the plain run (bit for bit: every kernel
here sums in a fixed order).

  zoo_check.py SHAPE

  dataloader  training fed by a torch DataLoader with two worker processes
              forked from the CUDA process (each epoch forks them anew) and
              pinned-memory batches copied without blocking
  spawn       a CUDA process that starts two more with multiprocessing's
              spawn method and hands them a CUDA tensor (CUDA IPC); each
              computes on the GPU and returns checksums through a queue
  fork-exit   a CUDA process forks a child that exits normally (its exit
              handlers run: lithos's too, in a copy of the parent's state),
              then goes on computing
  threads     two Python threads launching on their own streams, the second
              waiting for the first's events
  exit-busy   about half a second of kernels enqueued, then exit without
              waiting for them
  hopper      Hopper's own kernels: FP8 GEMMs (torch._scaled_mm, cuBLASLt)
              and flash attention (scaled_dot_product_attention, bf16)
  nccl        torch.distributed over NCCL with one rank: init, all_reduce,
              broadcast, all_gather, barrier, destroy
  capture-first  the first kernel the process launches is made inside a CUDA
              graph capture (torch.cuda.graph, global mode): its data came
              by a copy, no kernel ran before; then the graph is replayed
"""
import json
import os
import sys
import threading
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402

DEV = "cuda"


def _checksum(t):
    t = t.double()
    return [float(t.sum().item()), float(t.abs().sum().item())]


class Samples(torch.utils.data.Dataset):
    """Sample i is made from seed i, whichever worker makes it."""

    def __len__(self):
        return 512

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(64, generator=g), torch.randn(8, generator=g)


def dataloader():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8)).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(Samples(), batch_size=32, num_workers=2, pin_memory=True,
                                         multiprocessing_context="fork")
    losses = []
    for _ in range(2):  # each epoch forks its workers anew
        for x, y in loader:
            x, y = x.to(DEV, non_blocking=True), y.to(DEV, non_blocking=True)
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.detach())
    return {"losses": [float(v) for v in torch.stack(losses).double().cpu()],
            "weights": _checksum(torch.cat([p.flatten() for p in model.parameters()]))}


def _spawned(rank, shared, out):
    g = torch.Generator().manual_seed(10 + rank)
    a = torch.randn(512, 512, generator=g).to(DEV)
    w = torch.randn(512, 512, generator=g).to(DEV)
    for _ in range(20):
        a = torch.tanh(a @ w / 16.0)
    out.put((rank, _checksum(a) + _checksum(shared @ a)))


def spawn():
    torch.manual_seed(0)
    before = torch.randn(256, 256, device=DEV)
    shared = torch.randn(512, 512, device=DEV)  # reaches the children through CUDA IPC
    ctx = torch.multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_spawned, args=(r, shared, out)) for r in range(2)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(60)
    codes = [p.exitcode for p in procs]
    return {"children": [results[r] for r in range(2)], "exitcodes": codes,
            "parent": _checksum(before @ before)}


def fork_exit():
    torch.manual_seed(0)
    a = torch.randn(1024, 1024, device=DEV)
    b = a @ a
    torch.cuda.synchronize()
    pid = os.fork()
    if pid == 0:  # the child: CPU work only, then a normal exit (exit handlers run)
        sum(i * i for i in range(100000))
        sys.exit(0)
    _, status = os.waitpid(pid, 0)
    c = torch.relu(b @ a)
    return {"child_exit": os.waitstatus_to_exitcode(status), "result": _checksum(c)}


def threads():
    torch.manual_seed(0)
    a = torch.randn(512, 512, device=DEV)
    b = torch.randn(512, 512, device=DEV)
    torch.cuda.synchronize()
    events = [torch.cuda.Event() for _ in range(20)]
    outs = {}

    def first():
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            x = a
            for e in events:
                x = torch.tanh(x @ a / 16.0)
                e.record(s)
            outs["first"] = x
        s.synchronize()

    def second():
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            y = b
            for i, e in enumerate(events):
                s.wait_event(e)
                y = torch.sigmoid(y @ b / 16.0) + 0.0 * i
            outs["second"] = y
        s.synchronize()

    t1 = threading.Thread(target=first)
    t1.start()
    t1.join()  # the events are recorded before the second thread waits on them
    # Then both at once: the first records them again while the second waits.
    t2 = threading.Thread(target=second)
    t3 = threading.Thread(target=first)
    t2.start()
    t3.start()
    t2.join()
    t3.join()
    return {"first": _checksum(outs["first"]), "second": _checksum(outs["second"])}


def exit_busy():
    a = torch.randn(4096, 4096, device=DEV)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(3):
        a @ a
    torch.cuda.synchronize()
    per = (time.perf_counter() - t0) / 3
    for _ in range(max(1, int(0.5 / max(per, 1e-5)))):
        a = torch.tanh(a @ a)
    return {"ok": True}  # printed, then the process exits with the work in flight


def hopper():
    g = torch.Generator().manual_seed(3)
    out = {}
    a = (torch.randn(1024, 2048, generator=g) / 4).to(DEV).to(torch.float8_e4m3fn)
    b = (torch.randn(4096, 2048, generator=g) / 4).to(DEV).to(torch.float8_e4m3fn).t()  # column-major
    one = torch.ones((), device=DEV)
    out["fp8_gemm"] = _checksum(torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
    q, k, v = (torch.randn(8, 16, 1024, 128, generator=g).to(DEV, torch.bfloat16) for _ in range(3))
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
        out["flash_attention"] = _checksum(torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
    return out


def nccl():
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device(DEV, 0))
    g = torch.Generator().manual_seed(4)
    x = torch.randn(1 << 20, generator=g).to(DEV)
    dist.all_reduce(x)
    y = torch.randn(4096, generator=g).to(DEV)
    dist.broadcast(y, src=0)
    parts = [torch.empty(4096, device=DEV)]
    dist.all_gather(parts, y * 2)
    dist.barrier()
    result = {"all_reduce": _checksum(x), "broadcast": _checksum(y), "all_gather": _checksum(parts[0]),
              "backend": dist.get_backend()}
    dist.destroy_process_group()
    return result


def capture_first():
    x = torch.empty(1 << 16, device=DEV)  # no kernel
    x.copy_(torch.arange(1 << 16, dtype=torch.float32) / 7)  # a copy, no kernel
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):  # the process's first kernels, captured
        y = torch.tanh(x * 2 + 1)
        z = y.sum()
    sums = []
    for i in range(3):
        x.copy_(torch.arange(1 << 16, dtype=torch.float32) / (7 + i))
        g.replay()
        sums.append(_checksum(y))
    torch.cuda.synchronize()
    return {"replays": sums, "z": float(z)}


SHAPES = {"dataloader": dataloader, "spawn": spawn, "fork-exit": fork_exit, "threads": threads,
          "exit-busy": exit_busy, "hopper": hopper, "nccl": nccl, "capture-first": capture_first}


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in SHAPES:
        print(f"usage: zoo_check.py {{{'|'.join(SHAPES)}}}", file=sys.stderr)
        return 2
    torch.use_deterministic_algorithms(True)
    t0 = time.perf_counter()
    result = SHAPES[sys.argv[1]]()
    print(json.dumps({"shape": sys.argv[1], **result}), flush=True)
    print(f"zoo_check {sys.argv[1]}: {time.perf_counter() - t0:.2f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
