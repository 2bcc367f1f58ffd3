#!/usr/bin/env python3
"""Best-effort CUDA graphs replayed node by node give the same results: a
small deterministic convolutional network (convolutions, batch norm in eval
mode, pooling, a cuBLAS matmul, a device-to-device copy into the output) is
captured once as a CUDA graph and replayed on REPLAYS different inputs,
then a transformer encoder layer likewise, replays alternating between
three streams; the outputs' checksums are printed as one JSON line. Run
once plainly (the graph replays whole) and as a best-effort tenant of
lithosd that does not run free (every replay then goes node by node,
graph_replay.hpp); the lines must be equal bit for bit (gpu-daemon.sh,
phase "graphs"). Last, a small residual MLP is trained for REPLAYS steps
under torch.compile(mode="reduce-overhead"): torch's own CUDA graphs
(cudagraph trees, forward and backward), captured with the tenant's
launches going through lithos, replayed every step; the losses and the
weights' checksum join the line. The mean time per replay (launch to
completion, synchronised) goes to stderr.

  graph_check.py REPLAYS
"""
import json
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, 64, 7, stride=2, padding=3), torch.nn.BatchNorm2d(64), torch.nn.ReLU(),
            torch.nn.MaxPool2d(3, 2, 1),
            torch.nn.Conv2d(64, 128, 3, padding=1), torch.nn.BatchNorm2d(128), torch.nn.ReLU(),
            torch.nn.Conv2d(128, 256, 3, stride=2, padding=1), torch.nn.BatchNorm2d(256), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
        self.head = torch.nn.Linear(256, 1000)

    def forward(self, x):
        return self.head(self.body(x))


def check(net, inputs, streams, sums):
    """Captures `net` on inputs[0]'s shape, replays it on every input (on
    the streams in turn) and appends the outputs' checksums to `sums`."""
    dev = torch.device("cuda")
    static_in = torch.zeros_like(inputs[0], device=dev)
    with torch.no_grad():
        static_out = torch.zeros_like(net(static_in))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        for _ in range(3):  # warm up (cuDNN / cuBLAS choose their kernels)
            static_out.copy_(net(static_in))
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        y = net(static_in)
        static_out.copy_(y)
    elapsed = 0.0
    for i, x in enumerate(inputs):
        static_in.copy_(x.to(dev))
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        # Replays alternate between streams (lithos orders replays of one
        # exec on different streams as the driver does).
        s = streams[i % len(streams)]
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            graph.replay()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        elapsed += time.perf_counter() - t0
        sums.append(float(static_out.double().sum().item()))
        sums.append(float(static_out.double().abs().sum().item()))
    return elapsed / len(inputs)


class Mlp(torch.nn.Module):
    """Residual blocks of layer norm, linear, GELU, linear: no kernel of it
    (cuBLAS with a fixed workspace, Inductor's reductions) adds in a
    varying order, so two runs agree bit for bit."""

    def __init__(self, d=256, blocks=3):
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Sequential(
            torch.nn.LayerNorm(d), torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))
            for _ in range(blocks))
        self.head = torch.nn.Linear(d, 16)

    def forward(self, x):
        for b in self.blocks:
            x = x + b(x)
        return self.head(x)


def compiled_training(steps, sums):
    """Trains Mlp under torch.compile(mode="reduce-overhead") for `steps`
    steps on fixed batches; appends each step's loss and the weights'
    checksums to `sums`; returns the mean time per step."""
    dev = torch.device("cuda")
    torch.manual_seed(2)
    model = Mlp().to(dev)
    net = torch.compile(model, mode="reduce-overhead")
    opt = torch.optim.SGD(model.parameters(), lr=0.05, foreach=True)
    gen = torch.Generator().manual_seed(1000)
    xs = [torch.randn(64, 32, 256, generator=gen).to(dev) for _ in range(4)]
    ys = [torch.randn(64, 32, 16, generator=gen).to(dev) for _ in range(4)]
    elapsed = 0.0
    for i in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        torch.compiler.cudagraph_mark_step_begin()
        loss = torch.nn.functional.mse_loss(net(xs[i % 4]), ys[i % 4])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if i >= 3:  # the first steps record and capture
            elapsed += time.perf_counter() - t0
        sums.append(float(loss.detach().double().item()))
    with torch.no_grad():
        sums.append(float(sum(p.double().sum() for p in model.parameters()).item()))
    return elapsed / max(1, steps - 3)


def main():
    replays = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    dev = torch.device("cuda")
    streams = [torch.cuda.current_stream(), torch.cuda.Stream(), torch.cuda.Stream()]
    sums = []
    conv = Net().to(dev).eval()
    images = [torch.randn(32, 3, 112, 112, generator=torch.Generator().manual_seed(10 + i)) for i in range(replays)]
    t_conv = check(conv, images, streams, sums)
    # A transformer encoder layer (attention, layer norm, GELU) on another
    # graph: other kernel families (flash attention, fused layer norm).
    layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, activation="gelu", batch_first=True).to(dev).eval()
    tokens = [torch.randn(16, 128, 512, generator=torch.Generator().manual_seed(100 + i)) for i in range(replays)]
    t_attn = check(layer, tokens, streams, sums)
    t_train = compiled_training(replays, sums)
    print(json.dumps({"checksums": sums}))
    print(f"graph_check: {replays} replays each, {1e3 * t_conv:.3f} ms per conv replay, "
          f"{1e3 * t_attn:.3f} ms per transformer replay, {1e3 * t_train:.3f} ms per compiled "
          f"(reduce-overhead) training step", file=sys.stderr)


if __name__ == "__main__":
    main()
