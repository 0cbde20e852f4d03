"""Plain-text renderings for the terminal (the markdown report lives in report.py)."""
from __future__ import annotations

from costmodels.types import Estimate, Layout
from costmodels.units import GiB, fmt_bytes, fmt_seconds

MEMORY_LABELS = {
    "weights": "weights", "grads": "gradients", "optimizer": "optimizer state",
    "activations": "activations", "logits": "logits (loss)", "comm_buffers": "comm buckets",
    "workspace": "backward workspace", "step_copies": "optimizer-step copies", "fragmentation": "allocator cache",
    "cuda_context": "CUDA context",
}
TIME_LABELS = {
    "compute": "compute", "recompute": "recompute", "tp_comm": "TP collectives", "cp_comm": "CP exchange",
    "pp_comm": "PP send/recv", "bubble": "pipeline bubble", "dp_comm": "DP gradient sync (exposed)",
    "zero_comm": "ZeRO-3 gathers (exposed)", "offload": "offload traffic", "optimizer": "optimizer step",
    "overhead": "host / step overhead",
}


def step_peak_note(step_peak: float, activation_peak: float) -> str:
    """The optimizer step's own peak allocation, where it is the larger (memory.zero_step_peak_bytes)."""
    if step_peak <= activation_peak:
        return ""
    return (f"the optimizer step allocates {step_peak / GiB:.2f} GiB at its peak, after the activations are "
            f"freed; the activation peak, weights to backward workspace above, is {activation_peak / GiB:.2f} GiB")


def layout_line(l: Layout) -> str:
    flags = []
    flags.append(f"ZeRO-{l.zero}")
    if l.offload_optimizer.value != "none":
        flags.append(f"optimizer->{l.offload_optimizer.value}")
    if l.offload_params.value != "none":
        flags.append(f"params->{l.offload_params.value}")
    if l.offload_activations.value != "none":
        flags.append(f"checkpoints->{l.offload_activations.value}")
    if l.cpu_offload_layers:
        per = "layer" if l.cpu_offload_layers == 1 else "layers"
        flags.append(f"activations of {l.cpu_offload_layers} {per}->cpu")
    per = "layer" if l.recompute_layers == 1 else "layers"
    rc = l.recompute.value + (f" ({l.recompute_layers} {per}/stage)" if l.recompute_layers else "")
    flags += [f"recompute {rc}", l.precision.value]
    if l.flash_attention:
        flags.append("flash-attn")
    if l.sequence_parallel:
        flags.append("seq-parallel")
    if l.tp_comm_overlap:
        flags.append("tp-comm-overlap")
    if l.sparsity.value != "dense":
        flags.append(f"sparsity {l.sparsity.value}")
    if l.grad_comm.value != "fp32":
        flags.append(f"grad-comm {l.grad_comm.value}")
    head = f"tp {l.tp}  pp {l.pp}" + (f" (vpp {l.vpp})" if l.vpp > 1 else "") + f"  dp {l.dp}  cp {l.cp}"
    return (f"{head} | micro {l.mbs}  global {l.gbs}  seq {l.seq_len} "
            f"({l.num_microbatches} micro-batch{'es' if l.num_microbatches != 1 else ''}) | " + "  ".join(flags))


def _band(bands, key, fmt) -> str:
    """' (80% band LOW-HIGH)' when `bands` (planner.ties.bands_dict) has `key`."""
    if not bands or key not in bands:
        return ""
    lo, hi = bands[key]
    return f" (80% band {fmt(lo)} - {fmt(hi)})"


COMM_KEYS = ("tp_comm", "cp_comm", "pp_comm", "dp_comm", "zero_comm")


def comm_summary(est: Estimate, hidden: dict | None = None) -> str:
    """'compute 33.1%, pipeline bubble 44.3%, ..., exposed communication 11.3% (TP collectives 6.7%, ...);
    communication hidden behind compute 4.2 s': where the step goes, in one line."""
    step = est.step_time_s
    parts = [(TIME_LABELS[k].replace(" (exposed)", ""), getattr(est.time, k)) for k in COMM_KEYS]
    exposed = sum(v for _, v in parts)
    others = [(TIME_LABELS[k], getattr(est.time, k)) for k in TIME_LABELS
              if k not in COMM_KEYS and k != "compute" and getattr(est.time, k) / step >= 0.01]
    text = ", ".join([f"compute {est.time.compute / step * 100:.1f}%"]
                     + [f"{label} {v / step * 100:.1f}%" for label, v in sorted(others, key=lambda x: -x[1])]
                     + [f"exposed communication {exposed / step * 100:.1f}%"])
    shown = [f"{label} {v / step * 100:.1f}%" for label, v in parts if v / step >= 0.001]
    if shown:
        text += f" ({', '.join(shown)})"
    if hidden:
        text += f"; communication hidden behind compute {fmt_seconds(sum(hidden.values()))}"
    return text


def estimate_text(title: str, layout: Layout, est: Estimate, *, total_tokens: float = 0.0,
                  price: float = 0.0, currency: str = "", defaults=(), hidden: dict | None = None,
                  bands: dict | None = None) -> str:
    lines = [title, "  " + layout_line(layout), ""]
    lines.append(f"  step time        {fmt_seconds(est.step_time_s)}" + _band(bands, "step_time_band_s", fmt_seconds))
    lines.append(f"  tokens/s         {est.tokens_per_s:,.0f} ({est.tokens_per_s_per_gpu:,.0f} per GPU)")
    lines.append(f"  model TFLOP/s    {est.model_flop_per_s_per_gpu / 1e12:.1f} per GPU   "
                 f"MFU {est.mfu * 100:.1f}%   HFU {est.hfu * 100:.1f}%")
    status = ("fits only without the allocator's cache" if est.tight else "fits") if est.fits else "DOES NOT FIT"
    lines.append(f"  memory per GPU   {fmt_bytes(est.peak_memory_bytes)} of {fmt_bytes(est.hbm_bytes)}  "
                 f"({status}, headroom {fmt_bytes(est.headroom_bytes)})"
                 + _band(bands, "peak_memory_band_bytes", fmt_bytes))
    if est.tight:
        lines.append(f"  TIGHT: runs only if PyTorch's caching allocator gives back its cache (live tensors and "
                     f"context {fmt_bytes(est.required_memory_bytes)}); expect allocator retries, and "
                     "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation")
    if bands and bands.get("oom_risk"):
        lines.append("  OOM RISK: the upper memory band exceeds the GPU's memory")
    if not est.host_fits:
        lines.append("  offloaded state does not fit in host memory / NVMe")
    if total_tokens:
        seconds = est.time_to_train_s(total_tokens)
        gpu_h = seconds * est.num_gpus / 3600
        cost = f", cost {price * gpu_h:,.0f}{' ' + currency if currency else ''}" if price else ""
        lines.append(f"  {total_tokens:.3g} tokens in {fmt_seconds(seconds)}: {gpu_h:,.0f} GPU-hours{cost}")
    lines.append("")
    lines.append("  memory per GPU (peak stage)")
    for key, label in MEMORY_LABELS.items():
        value = getattr(est.memory, key)
        if value:
            lines.append(f"    {label:28s} {value / GiB:8.2f} GiB")
    note = step_peak_note(est.memory.step_peak, est.memory.activation_peak)
    if note:
        lines.append(f"    ({note})")
    lines.append("  time per step")
    step = est.step_time_s
    for key, label in TIME_LABELS.items():
        value = getattr(est.time, key)
        if value > 1e-9:
            lines.append(f"    {label:28s} {fmt_seconds(value):>10s}  {value / step * 100:5.1f}%")
    if hidden:
        from .breakdown import HIDDEN_LABELS
        lines.append("  communication hidden behind compute (overlapped, not in the step)")
        for key, value in hidden.items():
            lines.append(f"    {HIDDEN_LABELS[key]:28s} {fmt_seconds(value):>10s}")
    if defaults:
        lines.append("")
        lines.append("  defaults used: " + "; ".join(defaults))
    return "\n".join(lines)
