#!/usr/bin/env python3
"""A PyTorch process for scripts/faults/gpu-trust.sh: a service (requests
of a few milliseconds of GEMMs, back to back or at a rate) or a training
loop, printing one JSON line per request or step.

  svc.py --kind service|train --seconds S [--rate R] [--linger S] [--fault-after S]

Lines: {"event":"start","t":...} first (before torch is imported);
{"event":"ready","t":...} once CUDA works; {"event":"req","t":...,
"ms":...} per request (per step for train); {"event":"error","t":...,
"message":...} when a CUDA call fails, then exit 1, or with --linger stay
alive that long first (a process that catches the error and goes on);
{"event":"done","t":...,"n":...} at the end. With --fault-after S a step
after S seconds writes through a pointer it does not own (a Triton kernel),
a fatal GPU fault. t: time.time()."""
import argparse
import json
import sys
import time


def say(**kw):
    print(json.dumps(dict(t=time.time(), **kw)), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", choices=("service", "train"), default="service")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--rate", type=float, default=0, help="requests per second (0: back to back)")
    ap.add_argument("--linger", type=float, default=0)
    ap.add_argument("--fault-after", type=float, default=-1)
    a = ap.parse_args()
    say(event="start")  # before torch is imported: the process's own start-up follows
    import torch
    dev = torch.device("cuda")
    try:
        if a.kind == "service":
            w = [torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16) for _ in range(4)]
            x = torch.randn(256, 4096, device=dev, dtype=torch.bfloat16)

            def step():
                y = x
                for _ in range(6):
                    for m in w:
                        y = torch.relu(y @ m) * 0.01
                return y
        else:
            model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096, device=dev, dtype=torch.bfloat16)
                                          for _ in range(8)])
            opt = torch.optim.SGD(model.parameters(), lr=1e-4)
            xb = torch.randn(2048, 4096, device=dev, dtype=torch.bfloat16)

            def step():
                opt.zero_grad(set_to_none=True)
                loss = model(xb).float().pow(2).mean()
                loss.backward()
                opt.step()
                return loss
        bad = None
        if a.fault_after >= 0:
            import triton
            import triton.language as tl

            @triton.jit
            def scribble(p, stride, n: tl.constexpr):
                i = tl.arange(0, n)
                tl.store(p + i.to(tl.int64) * stride, i)

            target = torch.empty(1, device=dev, dtype=torch.int32)
            scribble[(1,)](target, 0, n=64)  # compiled now, harmless: every lane writes target[0]
            bad = lambda: scribble[(1,)](target, 1 << 40, n=64)  # far outside any allocation
        step()
        torch.cuda.synchronize()
        say(event="ready")
        t0 = time.time()
        n = 0
        faulted = False
        while time.time() - t0 < a.seconds:
            if a.rate > 0:
                due = t0 + n / a.rate
                while time.time() < due:
                    time.sleep(min(0.0005, max(0.0, due - time.time())))
            s = time.perf_counter()
            step()
            if bad is not None and not faulted and time.time() - t0 >= a.fault_after:
                say(event="faulting")
                faulted = True
                bad()
            torch.cuda.synchronize()
            say(event="req", ms=(time.perf_counter() - s) * 1e3)
            n += 1
        say(event="done", n=n)
        return 0
    except Exception as e:  # a CUDA error: what a real service meets
        say(event="error", message=str(e).splitlines()[0][:300])
        if a.linger > 0:
            time.sleep(a.linger)
            say(event="lingered")
        return 1


if __name__ == "__main__":
    sys.exit(main())
