"""A pairing lithos was not tuned on (workload "module", docs/bench-protocol.md
section 1.4): an eager recurrent service (a GRU encoder over 64 steps, cuDNN's
RNN kernels, then a linear head), launched kernel by kernel for every request,
beside a small vision transformer in training (patch convolution, attention
through scaled_dot_product_attention, fused AdamW)."""
import torch
import torch.nn as nn


class GruService:
    """One request: a batch of sequences through a 2-layer GRU, eager."""

    def __init__(self, args, dev):
        h = args.get("hidden", 1024)
        self.rnn = nn.GRU(h, h, num_layers=args.get("layers", 2), batch_first=True).to(dev, torch.float16).eval()
        self.head = nn.Linear(h, 256).to(dev, torch.float16).eval()
        self.x = torch.randn(args.get("batch", 32), args.get("steps", 64), h, device=dev, dtype=torch.float16)

    def step(self):
        with torch.inference_mode():
            out, _ = self.rnn(self.x)
            self.head(out[:, -1]).softmax(-1)


class Vit(nn.Module):
    def __init__(self, d, layers, heads, patch):
        super().__init__()
        self.patch = nn.Conv2d(3, d, patch, stride=patch)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, batch_first=True, norm_first=True, activation="gelu")
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, 1000)

    def forward(self, img):
        x = self.patch(img).flatten(2).transpose(1, 2)
        return self.head(self.body(x).mean(1))


class VitTrainer:
    """One step: forward under bf16 autocast, cross entropy, backward, fused AdamW."""

    def __init__(self, args, dev):
        self.model = Vit(args.get("d", 512), args.get("layers", 6), args.get("heads", 8), 16).to(dev)
        self.img = torch.randn(args.get("batch", 64), 3, 224, 224, device=dev)
        self.y = torch.randint(0, 1000, (args.get("batch", 64),), device=dev)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, fused=True)

    def step(self):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(self.model(self.img).float(), self.y)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


def build(kind, args, device):
    dev = torch.device("cuda", device)
    torch.cuda.set_device(dev)
    torch.manual_seed(0)
    return VitTrainer(args, dev) if kind == "training" else GruService(args, dev)
