"""Per-layer ATen op counts of Megatron-DeepSpeed from two op-count reports (see README.md here).

Usage: python benchmarks/gpu/op_count/summarise.py SMALL.json LARGE.json LAYERS_SMALL LAYERS_LARGE

The two reports come from the same job with a different number of layers; the difference, divided by
the difference in layers, is what one layer dispatches per micro-batch (the first, non-boundary
micro-batch of the counted iteration); what is left of the smaller job is the part outside the layers.
`_unsafe_view` is counted apart: the dispatcher sees it as an op, but it launches nothing.
"""
from __future__ import annotations

import json
import sys
from collections import Counter

NO_KERNEL = ("_unsafe_view",)


def phase(report: dict, name: str) -> Counter:
    return Counter(report["phases"][name][0])


def split(counter: Counter) -> dict:
    ops = {k[3:]: v for k, v in counter.items() if k.startswith("op:") and v}
    views = sum(v for k, v in counter.items() if k.startswith("view:"))
    kernels = sum(v for k, v in ops.items() if k not in NO_KERNEL)
    return {"ops": kernels, "no_kernel_ops": sum(ops.get(k, 0) for k in NO_KERNEL), "views": views,
            "by_name": dict(sorted(((k, v) for k, v in ops.items() if k not in NO_KERNEL), key=lambda x: -x[1]))}


def per_layer(small: dict, large: dict, layers_small: int, layers_large: int) -> dict:
    out = {}
    for name in ("forward", "backward"):
        a, b = phase(small, name), phase(large, name)
        n = layers_large - layers_small
        diff = Counter({k: (b.get(k, 0) - a.get(k, 0)) / n for k in set(a) | set(b)})
        layer = split(diff)
        rest = split(Counter({k: a.get(k, 0) - layers_small * diff.get(k, 0) for k in a}))
        out[name] = {"layer": layer, "outside_layers": {k: rest[k] for k in ("ops", "no_kernel_ops", "views")}}
    return out


def rms_norm_cpu_ops(hidden: int = 64) -> dict:
    """Ops of torch.nn.functional.rms_norm (bf16, with a weight) forward and backward on the CPU, where it
    is a composite of elementwise ops; on CUDA PyTorch runs it as one fused op each way
    (aten::_fused_rms_norm, pytorch/pytorch#153666), which is what the GPU runs' stand-in RMSNorm ran."""
    import torch
    from torch.nn import functional as F
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += not func.is_view and func.overloadpacket.__name__ not in NO_KERNEL
            return func(*args, **(kwargs or {}))

    x = torch.randn(8, 1, hidden, dtype=torch.bfloat16, requires_grad=True)
    w = torch.ones(hidden, dtype=torch.bfloat16, requires_grad=True)
    with Count() as fwd:
        y = F.rms_norm(x, (hidden,), w, 1e-5)
    grad = torch.ones_like(y)
    with Count() as bwd:
        y.backward(grad)
    return {"forward": fwd.n, "backward": bwd.n}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 4:
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    small, large = (json.load(open(p)) for p in argv[:2])
    out = per_layer(small, large, int(argv[2]), int(argv[3]))
    out["rms_norm_cpu_ops"] = rms_norm_cpu_ops()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
