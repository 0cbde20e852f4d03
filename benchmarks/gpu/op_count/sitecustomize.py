"""Op-count hook for benchmarks/gpu/op_count (see its README): on PYTHONPATH with OP_COUNT_REPORT=PREFIX set,
every process that trains writes PREFIX.PID.json at exit, holding the ATen ops dispatched inside each
DeepSpeedEngine.forward / backward / step call of training iteration OP_COUNT_ITER (default 3; the first
iterations build caches), one Counter per call, keyed "op:NAME" or "view:NAME" (OpOverload.is_view).
On a machine without CUDA it also keeps DeepSpeed's CPU accelerator from building FlashAttention
(deepspeed/accelerator/cpu_accelerator.py get_op_builder), which Megatron-DeepSpeed asks for at import."""
import os

if os.environ.get("OP_COUNT_REPORT"):
    import atexit
    import collections
    import json

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    if not torch.cuda.is_available():
        from deepspeed.accelerator import cpu_accelerator

        _builder = cpu_accelerator.CPU_Accelerator.get_op_builder
        cpu_accelerator.CPU_Accelerator.get_op_builder = (
            lambda self, name: None if name == "FlashAttentionBuilder" else _builder(self, name))

    from deepspeed.runtime import engine as _engine

    TARGET = int(os.environ.get("OP_COUNT_ITER", "3"))
    state = {"iteration": 1, "target": TARGET, "phases": {}}

    class _Count(TorchDispatchMode):
        def __init__(self, counter):
            super().__init__()
            self.counter = counter

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kind = "view" if func.is_view else "op"
            self.counter[f"{kind}:{func.overloadpacket.__name__}"] += 1
            return func(*args, **(kwargs or {}))

    def _counted(name):
        original = getattr(_engine.DeepSpeedEngine, name)

        def call(self, *args, **kwargs):
            boundary = name == "step" and self.is_gradient_accumulation_boundary()
            if state["iteration"] != TARGET:
                out = original(self, *args, **kwargs)
            else:
                counter = collections.Counter()
                with _Count(counter):
                    out = original(self, *args, **kwargs)
                state["phases"].setdefault(name, []).append(dict(counter))
            state["iteration"] += boundary
            return out
        setattr(_engine.DeepSpeedEngine, name, call)

    for _name in ("forward", "backward", "step"):
        _counted(_name)

    @atexit.register
    def _write():
        if state["phases"]:
            with open(f"{os.environ['OP_COUNT_REPORT']}.{os.getpid()}.json", "w") as f:
                json.dump(state, f)
