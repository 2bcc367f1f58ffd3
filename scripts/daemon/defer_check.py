#!/usr/bin/env python3
"""Deferred launches give the same results: a small deterministic training
run (MLP + LayerNorm, AdamW with its fused multi-tensor kernels, a side
stream joined by an event, pinned non-blocking copies to the host) whose
per-step losses and final parameter checksum are printed as one JSON line.
Run once plainly and once as a best-effort tenant of lithosd (every launch
then goes through the deferred-launch queue); the two lines must be equal
bit for bit (gpu-daemon.sh, phase "defer").

  defer_check.py STEPS
"""
import json
import os
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    dev = torch.device("cuda")
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.LayerNorm(2048),
        torch.nn.Linear(2048, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 256)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    x = torch.randn(256, 512, generator=torch.Generator().manual_seed(1)).to(dev)
    y = torch.randn(256, 256, generator=torch.Generator().manual_seed(2)).to(dev)
    side = torch.cuda.Stream()
    host = torch.empty(steps, dtype=torch.float32).pin_memory()
    losses_dev = torch.empty(steps, device=dev)
    for i in range(steps):
        opt.zero_grad(set_to_none=True)
        out = model(x)
        loss = torch.nn.functional.mse_loss(out, y)
        loss.backward()
        opt.step()
        losses_dev[i] = loss.detach()
        # Work on a side stream ordered after the default stream by an event,
        # and the default stream ordered after it again.
        ev = torch.cuda.Event()
        ev.record()
        with torch.cuda.stream(side):
            side.wait_event(ev)
            scale = (out.detach().float().abs().mean() + 1.0)
        torch.cuda.current_stream().wait_stream(side)
        y = y * 0.999 + 0.001 * (scale / scale)
        if i % 10 == 9:
            float(loss.item())  # a synchronising read now and then
    host.copy_(losses_dev, non_blocking=True)
    torch.cuda.current_stream().synchronize()
    checksum = sum(float(p.double().sum().item()) for p in model.parameters())
    print(json.dumps({"losses": [float(v) for v in host.tolist()], "checksum": checksum}))


if __name__ == "__main__":
    main()
