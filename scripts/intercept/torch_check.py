"""PyTorch coverage and confinement check for liblithos.so.

Runs one measured section -- ResNet-50 and BERT-base inference (random
weights, nothing downloaded), a cuBLAS GEMM, a cuDNN convolution, a Triton
kernel, and a Triton kernel that records %smid -- then a CUDA-graph capture
and replay of ResNet-50. Writes DIR/outputs-TAG.pt (the outputs) and
DIR/check-TAG.json:
  - "lithos": counters of liblithos.so over the measured section (when
    preloaded): kernel launches seen, descriptors built, masks applied...
  - "profiler_kernels": kernels torch.profiler saw in the same section (with
    --profile), the reference for coverage;
  - "smid": the SMs the Triton %smid kernel ran on, and whether they lie in
    the expected TPC set.

  python3 torch_check.py --out DIR --tag TAG [--profile]
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lithos_py import Lithos, stats_delta  # noqa: E402

import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@triton.jit
def smid_kernel(x_ptr, out_ptr, ITERS: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    acc = x
    for _ in range(ITERS):  # some work, so that programs spread over the SMs
        acc = acc * 3 + 1
    smid = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [x], dtype=tl.int32, is_pure=False, pack=1)
    tl.store(out_ptr + offs, smid + (acc & 0))


def build(device):
    import torchvision
    import transformers

    torch.manual_seed(0)
    resnet = torchvision.models.resnet50(weights=None).to(device).eval()
    cfg = transformers.BertConfig()  # BERT-base: 12 layers, hidden 768
    bert = transformers.BertModel(cfg).to(device).eval()
    g = torch.Generator().manual_seed(1)
    inputs = {
        "img": torch.randn(8, 3, 224, 224, generator=g).to(device),
        "ids": torch.randint(0, cfg.vocab_size, (8, 128), generator=g).to(device),
        "a": torch.randn(2048, 2048, generator=g).to(device),
        "b": torch.randn(2048, 2048, generator=g).to(device),
        "cx": torch.randn(16, 64, 56, 56, generator=g).to(device),
        "cw": torch.randn(128, 64, 3, 3, generator=g).to(device),
        "u": torch.randn(1 << 20, generator=g).to(device),
        "v": torch.randn(1 << 20, generator=g).to(device),
        "sx": torch.zeros(132 * 64 * 32, dtype=torch.int32, device=device),
    }
    return resnet, bert, inputs


def section(resnet, bert, inp):
    out = {}
    with torch.no_grad():
        out["resnet50"] = resnet(inp["img"])
        out["bert"] = bert(input_ids=inp["ids"]).last_hidden_state
        out["gemm_fp32"] = inp["a"] @ inp["b"]
        out["gemm_bf16"] = inp["a"].bfloat16() @ inp["b"].bfloat16()
        out["conv"] = F.conv2d(inp["cx"], inp["cw"], padding=1)
        res = torch.empty_like(inp["u"])
        n = res.numel()
        add_kernel[(triton.cdiv(n, 1024),)](inp["u"], inp["v"], res, n, BLOCK=1024)
        out["triton_add"] = res
        sm = torch.empty_like(inp["sx"])
        smid_kernel[(inp["sx"].numel() // 32,)](inp["sx"], sm, ITERS=2000, BLOCK=32)
        out["smid"] = sm
    torch.cuda.synchronize()
    return out


def count_profiler_kernels(prof):
    from torch.autograd import DeviceType

    kernels, other = 0, 0
    names = {}
    for e in prof.events():
        if e.device_type != DeviceType.CUDA:
            continue
        if e.name.startswith("Memcpy") or e.name.startswith("Memset"):
            other += 1
            continue
        kernels += 1
        names[e.name] = names.get(e.name, 0) + 1
    return kernels, other, names


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tag", required=True)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    lithos = Lithos()
    result = {"tag": args.tag, "lithos_present": lithos.present(), "backend": lithos.backend()}
    dev = torch.device("cuda")
    t0 = time.time()
    resnet, bert, inp = build(dev)
    section(resnet, bert, inp)  # warm-up: lazy loading, library handles, Triton compilation
    section(resnet, bert, inp)
    result["setup_s"] = round(time.time() - t0, 2)

    before = lithos.stats()
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        try:
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                out = section(resnet, bert, inp)
            k, o, names = count_profiler_kernels(prof)
            result["profiler_kernels"] = k
            result["profiler_memcpy_memset"] = o
            result["profiler_kernel_names"] = len(names)
        except Exception as e:  # the profiler must not hide the rest
            result["profiler_error"] = repr(e)
            out = section(resnet, bert, inp)
    else:
        out = section(resnet, bert, inp)
    after = lithos.stats()
    if lithos.present():
        result["lithos"] = stats_delta(before, after)
        result["backend"] = lithos.backend()

    # Confinement seen from inside: the SMs the Triton %smid kernel ran on.
    sms = sorted(set(out["smid"].view(-1, 32)[:, 0].tolist()))
    expected_tpcs = lithos.process_tpcs() if lithos.present() else None
    props = torch.cuda.get_device_properties(0)
    expected = (
        sorted({2 * t for t in expected_tpcs} | {2 * t + 1 for t in expected_tpcs})
        if expected_tpcs
        else list(range(props.multi_processor_count))
    )
    result["smid"] = {
        "seen": len(sms),
        "expected": len(expected),
        "outside": len([s for s in sms if s not in expected]),
        "confined": all(s in expected for s in sms),
    }

    # CUDA graph: capture ResNet-50 once, replay.
    try:
        static_x = inp["img"].clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s), torch.no_grad():
            for _ in range(3):
                resnet(static_x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        gb = lithos.stats()
        with torch.cuda.graph(g), torch.no_grad():
            static_y = resnet(static_x)
        ga = lithos.stats()
        for _ in range(5):
            g.replay()
        torch.cuda.synchronize()
        gr = lithos.stats()
        out["graph_resnet50"] = static_y.clone()
        result["graph"] = {"replays": 5}
        if lithos.present():
            result["graph"]["capture"] = stats_delta(gb, ga)
            result["graph"]["replay"] = stats_delta(ga, gr)
    except Exception as e:
        result["graph_error"] = repr(e)

    out.pop("smid")
    torch.save({k: v.float().cpu() for k, v in out.items()}, os.path.join(args.out, f"outputs-{args.tag}.pt"))
    with open(os.path.join(args.out, f"check-{args.tag}.json"), "w") as f:
        json.dump(result, f, indent=1)
    print("TORCH", args.tag, json.dumps(result))


if __name__ == "__main__":
    main()
