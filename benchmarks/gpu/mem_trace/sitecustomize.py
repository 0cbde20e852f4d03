"""Memory-trace hook for benchmarks/gpu/mem_trace (see its README): on PYTHONPATH with MEM_TRACE_REPORT=PREFIX
set, every process that trains writes PREFIX.PID.json after training iteration MEM_TRACE_ITERS (default 3):
the bytes PyTorch's CPU allocator had handed out, allocation by allocation, from the process's start, and
where they peaked inside each DeepSpeedEngine.forward / backward / step call of every iteration.

How: torch.profiler with profile_memory=True is started when this module is imported, before anything is
allocated, so every allocation and every free of the run is one '[memory]' event with its signed size
(c10's ProfiledCPUMemoryReporter); their running sum is the allocated bytes, the CPU's counterpart of
torch.cuda.memory_allocated. Each engine call is a record_function range, read back to place the events.

On the CPU, PyTorch decomposes torch.nn.functional.rms_norm into eager ops that keep fp32 intermediates
for backward; on CUDA it is one fused op (aten::_fused_rms_norm, pytorch/pytorch#153666) that saves its
input and the fp32 reciprocal RMS per row. With MEM_TRACE_FUSED_RMSNORM=1 (the default) F.rms_norm is
replaced here by an autograd function that saves exactly those two, so the CPU saves what the GPU saves.

With HOST_TIME_REPORT=PREFIX set instead (benchmarks/gpu/host_time), nothing is profiled: the same CPU
stand-ins are put in place and every engine call of iterations 1 to HOST_TIME_ITERS (default 6) is timed,
wall clock (time.perf_counter_ns) and the thread's CPU time (time.thread_time_ns), into PREFIX.PID.json;
with HOST_SYNC_REPORT=PREFIX2 also, where the job would make the host wait for the device (host_syncs.py).
"""
import os

# torchrun's own process (no LOCAL_RANK) trains nothing: only its workers are traced.
_TIMING = bool(os.environ.get("HOST_TIME_REPORT")) and not os.environ.get("MEM_TRACE_REPORT")
if (os.environ.get("MEM_TRACE_REPORT") or _TIMING) and "LOCAL_RANK" in os.environ:
    import atexit
    import bisect
    import importlib.abc
    import importlib.util
    import json
    import sys
    import time

    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    _STACK = os.environ.get("MEM_TRACE_STACK", "0") == "1"
    _PROF = None
    if not _TIMING:
        _PROF = profile(activities=[ProfilerActivity.CPU], profile_memory=True, with_stack=_STACK)
        _PROF.__enter__()
    _ITERS = os.environ.get("HOST_TIME_ITERS", "6") if _TIMING else os.environ.get("MEM_TRACE_ITERS", "3")
    _STATE = {"iteration": 1, "micro": -1, "target": int(_ITERS), "done": False, "calls": [], "times": [],
              "call": None}

    if os.environ.get("MEM_TRACE_FUSED_RMSNORM", "1") == "1":
        from torch.nn import functional as _F

        class _FusedRMSNorm(torch.autograd.Function):
            """y = x * rstd * w with rstd = 1 / sqrt(mean(x^2) + eps) per row, in fp32; saves x and rstd
            as CUDA's _fused_rms_norm does (its backward reads input, rstd and weight)."""

            @staticmethod
            def forward(ctx, x, weight, eps):
                xf = x.float()
                rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
                out = (xf * rstd).to(x.dtype)
                out = out * weight if weight is not None else out
                ctx.save_for_backward(x, rstd, weight)
                return out

            @staticmethod
            def backward(ctx, grad):
                x, rstd, weight = ctx.saved_tensors
                xf, gf = x.float(), grad.float()
                xhat = xf * rstd
                gw = None
                if weight is not None:
                    gw = (gf * xhat).reshape(-1, x.shape[-1]).sum(0).to(weight.dtype)
                    gf = gf * weight.float()
                dx = rstd * (gf - xhat * (gf * xhat).mean(-1, keepdim=True))
                return dx.to(x.dtype), gw, None

        def _rms_norm(x, normalized_shape, weight=None, eps=None):
            return _FusedRMSNorm.apply(x, weight, 1e-6 if eps is None else eps)

        _F.rms_norm = _rms_norm
        torch.rms_norm = _rms_norm

        # On the CPU Megatron-DeepSpeed takes its own eager RMSNorm (megatron/model/__init__.py:8-15,
        # rmsnorm.py: fp32 x, x * rsqrt and the 16-bit output all kept for backward) where CUDA takes apex's
        # MixedFusedRMSNorm; its forward is made the fused one when the module is imported.
        class _PatchRMSNorm(importlib.abc.MetaPathFinder):
            def find_spec(self, fullname, path, target=None):
                if fullname != "megatron.model.rmsnorm":
                    return None
                sys.meta_path.remove(self)
                spec = importlib.util.find_spec(fullname)
                sys.meta_path.insert(0, self)
                loader = spec.loader
                exec_module = loader.exec_module

                def patched(module):
                    exec_module(module)
                    module.RMSNorm.forward = lambda norm, x: _rms_norm(x, (x.shape[-1],), norm.weight, norm.eps)
                loader.exec_module = patched
                return spec

        sys.meta_path.insert(0, _PatchRMSNorm())

    # On a machine without CUDA, Megatron-DeepSpeed takes torch.optim.Adam instead of apex's FusedAdam
    # (megatron/optimizer/__init__.py:4-9), whose CPU path allocates temporaries the size of the state in its
    # step (_single_tensor_adam). The GPU runs' optimizer, the apex stand-in (fused AdamW: no temporaries), is
    # put in its place, so that the step allocates what it allocates on the GPU.
    if not torch.cuda.is_available():
        import torch.optim

        try:
            from apex.optimizers import FusedAdam as _GpuAdam
        except ImportError:
            _GpuAdam = None
        if _GpuAdam is not None:
            torch.optim.Adam = _GpuAdam

    def _event_name(e):
        try:
            return e.name()
        except UnicodeDecodeError:      # seen on Python-function events with with_stack=True
            return "?"

    def _innermost(ops, t):
        """The innermost op running at time t (its name, and with MEM_TRACE_STACK=1 its Python stack)."""
        best = None
        for e in ops:
            if e.start_ns() <= t <= e.end_ns() and (best is None or e.start_ns() >= best.start_ns()):
                best = e
        if best is None:
            return "?"
        return _event_name(best) + ("".join(f" < {f}" for f in best.stack()[:6]) if _STACK else "")

    def _phases():
        """Running allocated bytes: the peak of the whole run, and per engine call its start, end and peak."""
        everything = [(e, _event_name(e)) for e in _PROF.profiler.kineto_results.events()]
        events = sorted((e.start_ns(), e.nbytes()) for e, n in everything
                        if n == "[memory]" and str(e.device_type()).endswith("CPU"))
        ranges = {n: (e.start_ns(), e.end_ns()) for e, n in everything if n.startswith("mem_trace:")}
        times = [t for t, _ in events]
        ops = [e for e, n in everything if n != "[memory]" and not n.startswith("mem_trace:")]
        running, total = [], 0
        for _, n in events:
            total += n
            running.append(total)
        calls = []
        for label in _STATE["calls"]:
            start, end = ranges[label]
            i = bisect.bisect_left(times, start)
            j = bisect.bisect_right(times, end)
            before = running[i - 1] if i > 0 else 0
            inside = running[i:j] or [before]
            _, name, iteration, micro = label.split(":")
            big = sorted(range(i, j), key=lambda k: -abs(events[k][1]))[:8]
            calls.append({"call": name, "iteration": int(iteration), "micro_batch": int(micro),
                          "start_bytes": before, "end_bytes": running[j - 1] if j > 0 else 0,
                          "peak_bytes": max(max(inside), before),
                          "largest": [[events[k][1], _innermost(ops, events[k][0])] for k in sorted(big)]})
        return {"peak_bytes": max(running) if running else 0, "events": len(events), "calls": calls}

    def _finish():
        if _STATE["done"] or not _STATE["calls"]:
            return
        _STATE["done"] = True
        if _TIMING:
            report = {"calls": _STATE["times"], "iterations": _STATE["target"], "torch": torch.__version__,
                      "rank": int(os.environ.get("RANK", "0")), "threads": torch.get_num_threads()}
            with open(f"{os.environ['HOST_TIME_REPORT']}.{os.getpid()}.json", "w") as f:
                json.dump(report, f)
            if os.environ.get("HOST_SYNC_REPORT"):
                import host_syncs
                micro = sum(1 for t in _STATE["times"]
                            if t["call"] == "forward" and t["iteration"] == host_syncs.ITERATION)
                host_syncs.report(f"{os.environ['HOST_SYNC_REPORT']}.{os.getpid()}.json", micro)
            return
        _PROF.__exit__(None, None, None)
        report = _phases()
        report["iterations"] = _STATE["target"]
        report["rank"] = int(os.environ.get("RANK", "0"))          # the pipeline stage, with pp = world size
        report["fused_rmsnorm"] = os.environ.get("MEM_TRACE_FUSED_RMSNORM", "1") == "1"
        report["torch"] = torch.__version__
        with open(f"{os.environ['MEM_TRACE_REPORT']}.{os.getpid()}.json", "w") as f:
            json.dump(report, f)

    atexit.register(_finish)

    # HOST_SYNC_REPORT=PREFIX (with HOST_TIME_REPORT): where the job would make the host wait for the GPU
    # (host_syncs.py here), counted over one iteration into PREFIX.PID.json; torch's part before DeepSpeed loads.
    if _TIMING and os.environ.get("HOST_SYNC_REPORT"):
        import host_syncs
        host_syncs.install(_STATE)

    try:
        from deepspeed.runtime import engine as _engine
    except ImportError:             # the launcher's own processes
        _engine = None
    else:
        # As benchmarks/gpu/op_count does: on a machine without CUDA keep DeepSpeed's CPU accelerator from
        # building FlashAttention, which Megatron-DeepSpeed asks for at import.
        if not torch.cuda.is_available():
            from deepspeed.accelerator import cpu_accelerator

            _builder = cpu_accelerator.CPU_Accelerator.get_op_builder
            cpu_accelerator.CPU_Accelerator.get_op_builder = (
                lambda self, name: None if name == "FlashAttentionBuilder" else _builder(self, name))
            # DeepSpeed's activation checkpointing makes a transport stream it never uses
            # (checkpointing.py:526, 613); the CPU accelerator has no Stream class.
            cpu_accelerator.CPU_Accelerator.Stream = property(lambda self: (lambda **_: None))
            # Megatron takes a rank's device as rank % device_count (megatron/initialize.py:213-219), which
            # DeepSpeed then checks against LOCAL_RANK; a node of the CPU accelerator has one "device", so
            # with several workers per node each is given its own, as GPUs are.
            _workers = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
            cpu_accelerator.CPU_Accelerator.device_count = lambda self: _workers
            # The host-time runs train fp16 as vTrain's jobs did; the CPU accelerator refuses it
            # (is_fp16_supported, supported_dtypes), though PyTorch's CPU ops take half tensors.
            if _TIMING:
                cpu_accelerator.CPU_Accelerator.is_fp16_supported = lambda self: True
                _dtypes = cpu_accelerator.CPU_Accelerator.supported_dtypes
                cpu_accelerator.CPU_Accelerator.supported_dtypes = (
                    lambda self: list({*_dtypes(self), torch.float16}))

    if _engine is not None:
        def _traced(name):
            original = getattr(_engine.DeepSpeedEngine, name)

            def call(self, *args, **kwargs):
                if _STATE["done"]:
                    return original(self, *args, **kwargs)
                # Megatron-DeepSpeed calls forward and backward once per micro-batch and step once per
                # iteration (megatron/training.py:746); step ends the iteration at its boundary.
                boundary = name == "step" and self.is_gradient_accumulation_boundary()
                if name == "forward":
                    _STATE["micro"] += 1
                label = f"mem_trace:{name}:{_STATE['iteration']}:{_STATE['micro']}"
                _STATE["calls"].append(label)
                if _TIMING:
                    wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
                    outer, _STATE["call"] = _STATE["call"], name
                    try:
                        out = original(self, *args, **kwargs)
                    finally:
                        _STATE["call"] = outer
                    _STATE["times"].append({"call": name, "iteration": _STATE["iteration"],
                                            "micro_batch": _STATE["micro"],
                                            "wall_s": (time.perf_counter_ns() - wall) * 1e-9,
                                            "cpu_s": (time.thread_time_ns() - cpu) * 1e-9})
                else:
                    with record_function(label):
                        out = original(self, *args, **kwargs)
                if boundary:
                    _STATE["micro"] = -1
                    _STATE["iteration"] += 1
                    if _STATE["iteration"] > _STATE["target"]:
                        _finish()
                return out
            setattr(_engine.DeepSpeedEngine, name, call)

        for _name in ("forward", "backward", "step"):
            _traced(_name)

        if _TIMING and os.environ.get("HOST_SYNC_REPORT"):
            host_syncs.install_accelerator()

        # Under pipeline parallelism DeepSpeed's PipelineEngine runs a whole iteration in train_batch: its
        # stages call the engine's forward (and the last stage its backward) per micro-batch, but not step
        # (runtime/pipe/engine.py train_batch, _exec_optimizer_step); an iteration ends with train_batch.
        from deepspeed.runtime.pipe import engine as _pipe

        _train_batch = _pipe.PipelineEngine.train_batch

        def _traced_train_batch(self, *args, **kwargs):
            if _STATE["done"]:
                return _train_batch(self, *args, **kwargs)
            label = f"mem_trace:train_batch:{_STATE['iteration']}:0"
            _STATE["calls"].append(label)
            with record_function(label):
                out = _train_batch(self, *args, **kwargs)
            _STATE["micro"] = -1
            _STATE["iteration"] += 1
            if _STATE["iteration"] > _STATE["target"]:
                _finish()
            return out
        _pipe.PipelineEngine.train_batch = _traced_train_batch
