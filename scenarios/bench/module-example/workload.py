"""An example of a workload of one's own for `lithos bench` (workload
"module", docs/bench-protocol.md section 1.4): a residual MLP in plain
PyTorch, served one batch per request from a CUDA graph, or trained with
AdamW. Copy it, replace the model and inputs with your own, and point a
scenario's params.path at your file."""
import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def _model(args, dev):
    d = args.get("d", 1024)
    return nn.Sequential(*[Block(d) for _ in range(args.get("layers", 8))]).to(dev), d


class Service:
    """One request: a forward pass over a batch, replayed from a CUDA graph
    captured once (static input and output buffers)."""

    def __init__(self, args, dev):
        model, d = _model(args, dev)
        self.model = model.to(torch.bfloat16).eval().requires_grad_(False)
        self.x = torch.randn(args.get("batch", 64), d, device=dev, dtype=torch.bfloat16)
        with torch.inference_mode():
            side = torch.cuda.Stream(dev)  # warm-up before capture, on a side stream
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side):
                for _ in range(3):
                    self.model(self.x)
            torch.cuda.current_stream(dev).wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.out = self.model(self.x)

    def step(self):
        self.graph.replay()


class Trainer:
    """One step: forward and loss under bf16 autocast, backward, AdamW."""

    def __init__(self, args, dev):
        self.model, d = _model(args, dev)
        self.x = torch.randn(args.get("batch", 256), d, device=dev)
        self.y = torch.randn(args.get("batch", 256), d, device=dev)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)

    def step(self):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.mse_loss(self.model(self.x).float(), self.y)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


def build(kind, args, device):
    dev = torch.device("cuda", device)
    torch.cuda.set_device(dev)
    torch.manual_seed(0)
    return Trainer(args, dev) if kind == "training" else Service(args, dev)
