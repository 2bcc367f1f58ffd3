"""GPU workloads of the bench tenant (tenant.py): PyTorch models and a Triton
spin kernel, each behind the same small runner interface.

  make_runner(workload, kind, params, device) -> runner, built and warmed up
  runner.step()          enqueue one request (training: one step); no host sync
  runner.sync()          wait for the device
  runner.set_params(p)   adopt a phase's params (only spin's kernel_ms varies)
  runner.apply_calib(c)  spin: take spin_iters_per_ms
  runner.measure(key)    "gpu_ms", "capacity_rps", spin: "spin_iters_per_ms"
  runner.info()          facts for the ready event

`params` arrive complete and checked (tenant.WORKLOADS holds the defaults).
Weights are random and built directly on the GPU; inputs are random tensors
made once and reused, so a request costs what the model costs and nothing
is ever downloaded. Inference runs under torch.inference_mode() and, with
params.graph, as the replay of a CUDA graph captured after warm-up (cuDNN
autotuning included); training runs with bf16 autocast and AdamW. With
params.compile a model is torch.compile'd in that mode (true: "default").
"""
import functools
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl

from timing import closed_loop_rps

WARMUP_ITERS = 10     # warm-up before capture / ready: at least this many ...
WARMUP_S = 1.0        # ... and at least this long (cuDNN, cuBLAS heuristics, clocks)

BERT_VOCAB, BERT_POSITIONS = 30522, 512
BERT = {  # layers, d, heads, ffn
    "bert-base": (12, 768, 12, 3072),
    "bert-large": (24, 1024, 16, 4096),
}
LLAMA1B = {"d": 2048, "layers": 16, "heads": 32, "kv_heads": 8, "ffn": 8192, "vocab": 32000}  # ~1.1 B
GPT = {"d": 768, "layers": 12, "heads": 12, "kv_heads": 12, "ffn": 3072, "vocab": 32000}


def make_runner(workload, kind, params, device):
    """The runner of `workload` as `kind`, built, warmed up (and captured)."""
    torch.cuda.set_device(device)
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    dev = torch.device("cuda", device)
    if workload == "spin":
        return SpinRunner(dev, params)
    if kind == "training":
        model, loss_fn = _training_model(workload, params, dev)
        return TrainRunner(dev, model, loss_fn, bool(params["compile"]))
    model, fn = _inference_model(workload, params, dev)
    return InferenceRunner(dev, model, fn, params["graph"], bool(params["compile"]))


# --- Runners ------------------------------------------------------------------

def _warm(fn, dev):
    """Runs fn (synchronised) at least WARMUP_ITERS times and WARMUP_S seconds."""
    t0 = time.perf_counter()
    n = 0
    while n < WARMUP_ITERS or time.perf_counter() - t0 < WARMUP_S:
        fn()
        torch.cuda.synchronize(dev)
        n += 1


def event_ms(fn, n, budget_s=math.inf):
    """Median GPU time of fn() from CUDA events on the current stream, over n
    runs (fewer, but at least 5, once budget_s seconds have passed)."""
    times = []
    t0 = time.perf_counter()
    while len(times) < n and (len(times) < 5 or time.perf_counter() - t0 < budget_s):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


class Runner:
    """What every GPU runner shares: synchronisation, measurement, info."""

    graph = False   # requests are CUDA-graph replays
    model = None    # the nn.Module, for the parameter count

    def __init__(self, dev):
        self.dev = dev

    def step(self):
        raise NotImplementedError

    def sync(self):
        torch.cuda.synchronize(self.dev)

    def set_params(self, params):
        """Models have no live params: phases with other params get their own
        runner (tenant.build_runners), so there is nothing to change here."""

    def apply_calib(self, calib):
        """Only the spin kernel depends on the calibration."""

    def measure(self, key):
        if key == "gpu_ms":
            return event_ms(self.step, 20, budget_s=2.0)
        if key == "capacity_rps":
            return closed_loop_rps(self.step, self.sync)
        raise ValueError(f"{type(self).__name__} cannot measure {key}")

    def info(self):
        d = {"torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton.__version__,
             "device_name": torch.cuda.get_device_name(self.dev), "graph": self.graph,
             "peak_mem_mib": round(torch.cuda.max_memory_allocated(self.dev) / 2**20, 1),
             "reserved_mib": round(torch.cuda.max_memory_reserved(self.dev) / 2**20, 1)}
        if self.model is not None:
            d["param_count"] = sum(p.numel() for p in self.model.parameters())
        return d


class InferenceRunner(Runner):
    """A forward pass `fn` (a closure over the model and its static inputs)
    under inference mode, eager or replayed from a CUDA graph. A compiled
    `fn` marks each request a new step for torch.compile's CUDA graphs (its
    modes that keep them: their outputs may be overwritten from then on)."""

    def __init__(self, dev, model, fn, graph, compiled=False):
        super().__init__(dev)
        self.model, self._fn, self.graph, self._compiled = model, fn, graph, compiled
        with torch.inference_mode():
            # Warm-up on a side stream, as capture needs (cuDNN benchmark
            # mode picks its algorithms here, before capture).
            side = torch.cuda.Stream(dev)
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side):
                _warm(fn, dev)
            torch.cuda.current_stream(dev).wait_stream(side)
            if graph:
                self._graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(self._graph):
                    self._out = fn()  # kept: the graph's output buffers
                for _ in range(3):
                    self._graph.replay()
                self.sync()

    def step(self):
        if self.graph:
            self._graph.replay()
        else:
            if self._compiled:
                torch.compiler.cudagraph_mark_step_begin()
            with torch.inference_mode():
                self._fn()


class TrainRunner(Runner):
    """One training step: forward and loss under bf16 autocast (weights
    fp32), backward, AdamW step. A compiled model's step is marked a new
    step for torch.compile's CUDA graphs, as for inference."""

    def __init__(self, dev, model, loss_fn, compiled=False):
        super().__init__(dev)
        self.model, self._loss_fn, self._compiled = model.train(), loss_fn, compiled
        try:
            self._opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
            self._fused = True
        except (RuntimeError, ValueError):  # fused kernels unsupported here
            self._opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
            self._fused = False
        _warm(self.step, dev)

    def step(self):
        if self._compiled:
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = self._loss_fn()
        loss.backward()
        self._opt.step()
        self._opt.zero_grad(set_to_none=True)

    def info(self):
        return {**super().info(), "optimizer": "AdamW" + (" (fused)" if self._fused else "")}


# --- Spin kernel --------------------------------------------------------------

# `iters` is a runtime argument, not specialised on its value (Triton would
# otherwise compile a variant per divisibility class, possibly mid-run).
@triton.jit(do_not_specialize=["iters"])
def _spin_kernel(out_ptr, iters, BLOCK: tl.constexpr):
    """Every thread runs `iters` x 4 dependent FMAs on a register and stores
    the result, so the loop survives the compiler and lasts ~iters."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = offs.to(tl.float32)
    for _ in range(iters):
        x = x * 0.999 + 1.0
        x = x * 0.999 + 1.0
        x = x * 0.999 + 1.0
        x = x * 0.999 + 1.0
    tl.store(out_ptr + offs, x)


class SpinRunner(Runner):
    """A request (or "step") is one launch of the spin kernel over one wave:
    num_SMs x blocks_per_sm blocks, each lasting the whole kernel, sized to
    last kernel_ms alone (iters = kernel_ms x spin_iters_per_ms)."""

    def __init__(self, dev, params):
        super().__init__(dev)
        self._num_warps = params["num_warps"]
        self._block = 32 * self._num_warps  # one element per thread
        # waves > 1: the kernel is that many waves of shorter blocks (what
        # the atomizer can split); 1: one wave, each block the whole kernel.
        self._waves = int(params.get("waves", 1))
        self._grid = (torch.cuda.get_device_properties(dev).multi_processor_count * params["blocks_per_sm"]
                      * self._waves)
        self._out = torch.empty(self._grid * self._block, device=dev, dtype=torch.float32)
        self._kernel_ms = params["kernel_ms"]
        self._iters_per_ms = None
        self._iters = 1000  # until the calibration is known
        self._compiled = self._launch(self._iters)  # compiles
        self.sync()

    def _launch(self, iters):
        return _spin_kernel[(self._grid,)](self._out, iters, BLOCK=self._block, num_warps=self._num_warps)

    def step(self):
        self._launch(self._iters)

    def set_kernel_ms(self, ms):
        self._kernel_ms = ms
        if self._iters_per_ms is not None:
            self._iters = max(1, round(ms * self._iters_per_ms))

    def set_params(self, params):
        self.set_kernel_ms(params["kernel_ms"])

    def apply_calib(self, calib):
        self._iters_per_ms = calib["spin_iters_per_ms"]
        self.set_kernel_ms(self._kernel_ms)

    def measure(self, key):
        if key != "spin_iters_per_ms":
            return super().measure(key)
        # A rough rate from a short probe, then the slope between ~1 ms and
        # ~5 ms kernels (the slope leaves out the fixed launch cost).
        probe = 20000
        rough = probe / event_ms(functools.partial(self._launch, probe), 5)
        n1, n2 = max(1, round(rough)), max(2, round(5 * rough))
        t1 = event_ms(functools.partial(self._launch, n1), 10)
        t2 = event_ms(functools.partial(self._launch, n2), 10)
        if not t2 > t1:
            raise RuntimeError(f"spin calibration: {n1} iterations took {t1} ms, {n2} took {t2} ms")
        return (n2 - n1) / (t2 - t1)

    def info(self):
        # Registers decide whether blocks_per_sm blocks fit on an SM at once
        # (one wave): 2 x 1024 threads need at most 32 registers per thread.
        return {**super().info(), "grid": self._grid, "threads_per_block": self._block,
                "regs_per_thread": getattr(self._compiled, "n_regs", None), "iters_per_ms": self._iters_per_ms}


# --- Models -------------------------------------------------------------------

def _resnet50():
    import torchvision  # only this workload needs it
    return torchvision.models.resnet50(weights=None)


class Bert(nn.Module):
    """BERT encoder: token + position embeddings, LayerNorm, post-LN
    Transformer encoder layers with GELU (no token types, no pooler)."""

    def __init__(self, layers, d, heads, ffn, dropout):
        super().__init__()
        self.tok = nn.Embedding(BERT_VOCAB, d)
        self.pos = nn.Embedding(BERT_POSITIONS, d)
        self.norm = nn.LayerNorm(d)
        layer = nn.TransformerEncoderLayer(d, heads, ffn, dropout=dropout, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.register_buffer("positions", torch.arange(BERT_POSITIONS), persistent=False)

    def forward(self, ids):
        x = self.tok(ids) + self.pos(self.positions[: ids.shape[1]])
        return self.encoder(self.norm(x))


class RMSNorm(nn.Module):
    def __init__(self, d, dtype, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d, dtype=dtype))

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * self.weight.float()).to(x.dtype)


def _rope(x, cos, sin):
    """Rotary embedding of x (..., positions, head_dim) with the tables of
    those positions (positions, head_dim / 2), rotate-half convention."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Attention(nn.Module):
    """Grouped-query attention with rotary embeddings.

    Without a cache: causal self-attention over the sequence. With a cache
    (decode, one new token per sequence): the token's k/v are written at
    `pos` of the static cache, and the query heads attend over the whole
    cache. A KV head's group of query heads is passed to SDPA as that
    many query rows of the KV head, so the cache is read once per KV head
    and is never expanded.
    """

    def __init__(self, d, heads, kv_heads, dtype):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
        self.wq = nn.Linear(d, heads * self.hd, bias=False, dtype=dtype)
        self.wk = nn.Linear(d, kv_heads * self.hd, bias=False, dtype=dtype)
        self.wv = nn.Linear(d, kv_heads * self.hd, bias=False, dtype=dtype)
        self.wo = nn.Linear(heads * self.hd, d, bias=False, dtype=dtype)

    def forward(self, x, cos, sin, cache=None, pos=0):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.heads, self.hd).transpose(1, 2)
        k = self.wk(x).view(b, s, self.kv_heads, self.hd).transpose(1, 2)
        v = self.wv(x).view(b, s, self.kv_heads, self.hd).transpose(1, 2)
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        group = self.heads // self.kv_heads
        if cache is None:
            if group > 1:  # expand K/V to every query head (cheap next to the matmuls)
                k = k[:, :, None].expand(b, self.kv_heads, group, s, self.hd).reshape(b, self.heads, s, self.hd)
                v = v[:, :, None].expand(b, self.kv_heads, group, s, self.hd).reshape(b, self.heads, s, self.hd)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            k_cache, v_cache = cache
            k_cache[:, :, pos:pos + s] = k
            v_cache[:, :, pos:pos + s] = v
            # (b, heads, 1, hd) -> (b, kv_heads, group, hd): query head h = kv*group + g
            o = F.scaled_dot_product_attention(q.reshape(b, self.kv_heads, group * s, self.hd), k_cache, v_cache)
        return self.wo(o.reshape(b, self.heads, s, self.hd).transpose(1, 2).reshape(b, s, self.heads * self.hd))


class MLP(nn.Module):
    """SwiGLU feed-forward."""

    def __init__(self, d, ffn, dtype):
        super().__init__()
        self.gate = nn.Linear(d, ffn, bias=False, dtype=dtype)
        self.up = nn.Linear(d, ffn, bias=False, dtype=dtype)
        self.down = nn.Linear(ffn, d, bias=False, dtype=dtype)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, d, heads, kv_heads, ffn, dtype):
        super().__init__()
        self.attn_norm = RMSNorm(d, dtype)
        self.attn = Attention(d, heads, kv_heads, dtype)
        self.mlp_norm = RMSNorm(d, dtype)
        self.mlp = MLP(d, ffn, dtype)

    def forward(self, x, cos, sin, cache=None, pos=0):
        x = x + self.attn(self.attn_norm(x), cos, sin, cache, pos)
        return x + self.mlp(self.mlp_norm(x))


class Decoder(nn.Module):
    """Llama-style decoder: pre-norm blocks of RMSNorm, rotary GQA and a
    SwiGLU MLP; untied output head unless `tie`. Positions up to max_pos."""

    def __init__(self, d, layers, heads, kv_heads, ffn, vocab, max_pos, dtype=None, tie=False):
        super().__init__()
        self.kv_heads, self.hd = kv_heads, d // heads
        self.embed = nn.Embedding(vocab, d, dtype=dtype)
        self.layers = nn.ModuleList(Block(d, heads, kv_heads, ffn, dtype) for _ in range(layers))
        self.norm = RMSNorm(d, dtype)
        self.head = nn.Linear(d, vocab, bias=False, dtype=dtype)
        if tie:
            self.head.weight = self.embed.weight
        inv_freq = 1.0 / 10000.0 ** (torch.arange(0, self.hd, 2, dtype=torch.float32) / self.hd)
        angles = torch.outer(torch.arange(max_pos, dtype=torch.float32), inv_freq)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, tokens, last_only=False):
        """Causal forward over tokens (b, s): logits (b, s, vocab), or of the
        last position only (b, vocab)."""
        s = tokens.shape[1]
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, self.cos[:s], self.sin[:s])
        if last_only:
            x = x[:, -1]
        return self.head(self.norm(x))

    def decode(self, tokens, caches, pos):
        """One decode step: tokens (b, 1) at position pos over `caches`
        (random_cache) -> logits (b, 1, vocab)."""
        x = self.embed(tokens)
        cos, sin = self.cos[pos:pos + 1], self.sin[pos:pos + 1]
        for layer, cache in zip(self.layers, caches):
            x = layer(x, cos, sin, cache, pos)
        return self.head(self.norm(x))

    def random_cache(self, batch, ctx):
        """A static KV cache of ctx positions per layer, random contents."""
        shape, dtype = (batch, self.kv_heads, ctx, self.hd), self.head.weight.dtype
        return [(torch.randn(shape, dtype=dtype), torch.randn(shape, dtype=dtype)) for _ in self.layers]


def _inference_model(workload, params, dev):
    """(model, fn): bf16 weights, fn() runs one request on static inputs.
    With params.compile the forward pass is torch.compile'd in that mode
    (default: Inductor's Triton kernels, no CUDA graphs of its own;
    reduce-overhead: replayed from torch's own CUDA graphs, cudagraph trees)."""
    bf16 = torch.bfloat16
    b = params["batch"]
    with torch.device(dev):
        if workload == "resnet50":
            model = _resnet50().to(dtype=bf16, memory_format=torch.channels_last)
            x = torch.randn(b, 3, 224, 224, dtype=bf16).contiguous(memory_format=torch.channels_last)
            call, args, kwargs = model, (x,), {}
        elif workload in BERT:
            model = Bert(*BERT[workload], dropout=0.0).to(bf16)
            call, args, kwargs = model, (torch.randint(0, BERT_VOCAB, (b, params["seq"])),), {}
        elif workload == "llama1b-prefill":
            model = Decoder(**LLAMA1B, max_pos=params["seq"], dtype=bf16)
            ids = torch.randint(0, LLAMA1B["vocab"], (b, params["seq"]))
            call, args, kwargs = model, (ids,), {"last_only": True}
        elif workload == "llama1b-decode":
            ctx = params["ctx"]
            model = Decoder(**LLAMA1B, max_pos=ctx, dtype=bf16)
            ids = torch.randint(0, LLAMA1B["vocab"], (b, 1))
            call, args, kwargs = model.decode, (ids, model.random_cache(b, ctx), ctx - 1), {}
        else:
            raise ValueError(f"no inference workload {workload}")
    model.eval().requires_grad_(False)
    if params.get("compile"):  # the mode's name (tenant.resolve_params)
        call = torch.compile(call, mode=params["compile"])
    return model, functools.partial(call, *args, **kwargs)


def _training_model(workload, params, dev):
    """(model, loss_fn): fp32 weights, loss_fn() is the loss of one batch of
    static random inputs and targets. With params.compile the model's
    forward (and so its backward) is torch.compile'd in that mode; the loss and the
    optimizer stay eager."""
    b = params["batch"]
    net = None  # the module the loss calls: the model, or its compiled form (set below)
    with torch.device(dev):
        if workload == "resnet50":
            model = _resnet50().to(memory_format=torch.channels_last)
            x = torch.randn(b, 3, 224, 224).contiguous(memory_format=torch.channels_last)
            y = torch.randint(0, 1000, (b,))

            def loss_fn():
                return F.cross_entropy(net(x), y)
        elif workload in BERT:
            layers, d, heads, ffn = BERT[workload]
            model = nn.Sequential(Bert(layers, d, heads, ffn, dropout=0.1), nn.Linear(d, BERT_VOCAB))  # MLM head
            ids = torch.randint(0, BERT_VOCAB, (b, params["seq"]))
            targets = torch.randint(0, BERT_VOCAB, (b, params["seq"]))

            def loss_fn():
                return F.cross_entropy(net(ids).flatten(0, 1), targets.flatten())
        elif workload == "gpt":
            s = params["seq"]
            model = Decoder(**GPT, max_pos=s, tie=True)
            tokens = torch.randint(0, GPT["vocab"], (b, s + 1))
            inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

            def loss_fn():  # next-token prediction
                return F.cross_entropy(net(inputs).flatten(0, 1), targets.flatten())
        else:
            raise ValueError(f"no training workload {workload}")
    net = torch.compile(model, mode=params["compile"]) if params.get("compile") else model
    return model, loss_fn
