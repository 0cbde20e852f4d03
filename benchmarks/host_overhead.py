"""Host time per kernel of eager Megatron, measured on the CPU (the physical anchor of `host_overhead`).

Usage: python benchmarks/host_overhead.py [--layers 24] [--repeats 7] [--json FILE]

The cost model charges `host_overhead_s` of CPU time for every kernel an eager Megatron layer issues
(costmodels/compute.py `_kernel_counts`), and a phase takes max(GPU time, host time). Only vTrain's
small-model rows reach that floor, so fitting the constant on step times leaves it to one source. This
script measures it another way: it runs the op sequence of Megatron's ParallelTransformerLayer (GPT-2
style, as in Megatron-DeepSpeed: layer norms, fused QKV, baddbmm scores, masked softmax, attention
dropout, bias-dropout-add, bias-GeLU; megatron/model/transformer.py) forward, backward, and with
reentrant activation checkpointing, on tiny CPU tensors, so that the arithmetic is negligible and
what remains is Python, module calls, the dispatcher and autograd: the host's side of every kernel.
Divided by the kernels the cost model counts for that layer, that is the host time per counted kernel.

It is a lower bound of the real figure: a GPU run also pays the CUDA launch path (driver call, stream
and allocator bookkeeping) per kernel, and DeepSpeed's engine hooks. benchmarks/fit.py uses the figure
printed here as the prior (and lower bound) of `host_overhead`; the value it prints depends on the CPU
(single thread), so run it on an idle machine and quote the CPU. The torch version matters little:
with vTrain's stack (torch 2.0.1, Python 3.10, per vTrain's docker/Dockerfile) it printed 6.5 / 9.5 us
on an Intel Xeon where torch 2.13 on Python 3.11 printed 6.9 / 10.6 us (2026-11-24); run it with
`PYTHONPATH=. other-venv/bin/python benchmarks/host_overhead.py` to compare stacks.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HIDDEN, HEADS, SEQ, BATCH, DROPOUT = 64, 4, 8, 1, 0.1


def counted_kernels():
    """(forward, backward) kernels the cost model counts for this layer (compute._kernel_counts), plus
    the 2 per pass the model adds for the layer's entry and exit."""
    from costmodels.compute import _kernel_counts
    from costmodels.types import ModelSpec
    m = ModelSpec(name="host-probe", num_layers=1, hidden=HIDDEN, ffn_hidden=4 * HIDDEN, num_heads=HEADS,
                  num_kv_heads=HEADS, vocab=128, max_seq_len=SEQ, hidden_dropout=DROPOUT,
                  attention_dropout=DROPOUT)
    fwd, bwd = _kernel_counts(m, False)
    return float(fwd) + 2.0, float(bwd) + 2.0


def build(layers: int):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Layer(nn.Module):
        """Megatron's ParallelTransformerLayer at tp 1 (megatron/model/transformer.py), [s, b, h]."""

        def __init__(self):
            super().__init__()
            h = HIDDEN
            self.input_layernorm = nn.LayerNorm(h)
            self.query_key_value = nn.Linear(h, 3 * h)
            self.dense = nn.Linear(h, h, bias=False)          # bias returned, fused into bias-dropout-add
            self.dense_bias = nn.Parameter(torch.zeros(h))
            self.post_attention_layernorm = nn.LayerNorm(h)
            self.dense_h_to_4h = nn.Linear(h, 4 * h, bias=False)
            self.dense_h_to_4h_bias = nn.Parameter(torch.zeros(4 * h))
            self.dense_4h_to_h = nn.Linear(4 * h, h, bias=False)
            self.dense_4h_to_h_bias = nn.Parameter(torch.zeros(h))
            self.register_buffer("mask", torch.ones(SEQ, SEQ, dtype=torch.bool).triu(1))

        def forward(self, x):
            s, b, h, a = SEQ, BATCH, HIDDEN, HEADS
            ln = self.input_layernorm(x)
            qkv = self.query_key_value(ln).view(s, b, a, 3 * h // a)
            q, k, v = torch.split(qkv, h // a, dim=3)
            q = q.reshape(s, b * a, -1).transpose(0, 1)
            k = k.reshape(s, b * a, -1).transpose(0, 1)
            scores = torch.baddbmm(torch.empty(b * a, s, s), q, k.transpose(1, 2), beta=0.0,
                                   alpha=1.0 / math.sqrt(h // a))
            probs = F.dropout(F.softmax(scores.masked_fill(self.mask, -10000.0), dim=-1), DROPOUT, True)
            ctx = torch.bmm(probs, v.reshape(s, b * a, -1).transpose(0, 1))
            ctx = ctx.view(b, a, s, -1).permute(2, 0, 1, 3).contiguous().view(s, b, h)
            x = x + F.dropout(self.dense(ctx) + self.dense_bias, DROPOUT, True)
            ln = self.post_attention_layernorm(x)
            act = F.gelu(self.dense_h_to_4h(ln) + self.dense_h_to_4h_bias)
            return x + F.dropout(self.dense_4h_to_h(act) + self.dense_4h_to_h_bias, DROPOUT, True)

    torch.set_num_threads(1)
    return torch, nn.ModuleList(Layer() for _ in range(layers)), torch.randn(SEQ, BATCH, HIDDEN, requires_grad=True)


def cpu_name() -> str:
    """The CPU's model name (Linux /proc/cpuinfo), else what `platform` knows: the figure depends on it."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def measure(layers: int = 24, repeats: int = 7, steps: int = 20) -> dict:
    """Seconds of host time per layer for forward + backward, without and with checkpointing (best of
    `repeats`: the floor, not the noise of a shared machine)."""
    torch, stack, x0 = build(layers)
    from torch.utils.checkpoint import checkpoint

    def step(recompute: bool):
        x = x0
        for layer in stack:
            x = checkpoint(layer, x, use_reentrant=True) if recompute else layer(x)
        x.sum().backward()

    out = {}
    for recompute in (False, True):
        for _ in range(3):
            step(recompute)
        best = math.inf
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(steps):
                step(recompute)
            best = min(best, (time.perf_counter() - t0) / steps / layers)
        out["recompute" if recompute else "plain"] = best
    fwd, bwd = counted_kernels()
    out["kernels_plain"] = fwd + bwd
    out["kernels_recompute"] = 2 * fwd + bwd
    out["per_kernel_plain_s"] = out["plain"] / out["kernels_plain"]
    out["per_kernel_recompute_s"] = out["recompute"] / out["kernels_recompute"]
    out["cpu"] = cpu_name()
    out["torch"] = torch.__version__
    out["python"] = platform.python_version()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = ap.parse_args(argv)
    r = measure(args.layers, args.repeats)
    print(f"CPU {r['cpu']}, torch {r['torch']}, Python {r['python']}, one thread, best of {args.repeats}")
    print(f"  forward + backward:            {r['plain'] * 1e3:6.3f} ms per layer, "
          f"{r['kernels_plain']:.0f} counted kernels -> {r['per_kernel_plain_s'] * 1e6:5.1f} us each")
    print(f"  with activation checkpointing: {r['recompute'] * 1e3:6.3f} ms per layer, "
          f"{r['kernels_recompute']:.0f} counted kernels -> {r['per_kernel_recompute_s'] * 1e6:5.1f} us each")
    print("  (CPU side only: a GPU run adds the CUDA launch path per kernel, so these are lower bounds)")
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
