"""Host-device synchronisation sites of the emitted job, counted on the CPU (benchmarks/gpu/host_time,
HOST_SYNC=1; loaded by sitecustomize.py here). On a GPU each call below blocks the Python thread until the
device has run everything queued before it, so the host cannot run ahead of the GPU past that point:

* a device tensor read on the host: Tensor.item / tolist / __bool__ / __int__ / __float__ / cpu / numpy
  (ATen _local_scalar_dense_cuda and copy_ to the CPU: cudaMemcpyAsync, then cudaStreamSynchronize);
* a device tensor made from host data: torch.tensor / torch.as_tensor with a device given, the accelerator's
  LongTensor(list) and the like, a host tensor's .to(device) / .cuda() (the copy to the device runs with
  non_blocking=False, which ATen's CUDA copy does as at::cuda::memcpy_and_sync);
* an output whose size depends on the data: torch.nonzero / masked_select / unique;
* explicit ones: torch.cuda.synchronize, DeepSpeed's accelerator synchronize, torch.distributed.barrier.

On the CPU every tensor is a host tensor, so each call is counted by where it is made (the first frame
outside torch), per engine call (forward, backward, step) or between them. Tensor.to(device) and .cuda()
without non_blocking (kinds marked *) wait only for a host tensor, which is not visible here: those sites
are read in the source. One iteration, HOST_SYNC_ITER (default 3), is counted. With HOST_SYNC_BYTES=1 the
same iteration's ATen ops also have their bytes summed (_count_bytes)."""
import functools
import json
import os
import sys

import torch

ITERATION = int(os.environ.get("HOST_SYNC_ITER", "3"))
_COUNTS: dict[tuple[str, str, str], int] = {}
_STATE: dict = {}
_TORCH_DIR = os.path.dirname(torch.__file__)
_HERE = os.path.abspath(__file__)


def _site() -> str:
    """file:line of the first caller outside torch and this module, from its package root."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_TORCH_DIR) and os.path.abspath(name) != _HERE and "functools" not in name:
            for root in ("/megatron/", "/deepspeed/", "/pretrain_gpt"):
                if root in name:
                    name = name[name.index(root) + 1:]
                    break
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


def install(state: dict) -> None:
    """Count the calls above while state["iteration"] == ITERATION; state["call"] names the engine call
    running ("forward", "backward", "step") or is None between them. Called before DeepSpeed is imported
    (ZeRO-3's zero.Init keeps the torch.tensor it finds at import and puts it back when it exits), then
    install_accelerator after."""

    def counted(kind, original, when=None):
        @functools.wraps(original)
        def call(*args, **kwargs):
            if state["iteration"] == ITERATION and (when is None or when(args, kwargs)):
                key = (state["call"] or "between", kind, _site())
                _COUNTS[key] = _COUNTS.get(key, 0) + 1
            return original(*args, **kwargs)
        return call

    _STATE.update(counted=counted)
    if os.environ.get("HOST_SYNC_BYTES") == "1":
        _count_bytes(state)
    for name in ("item", "tolist", "__bool__", "__int__", "__float__", "cpu", "numpy", "nonzero",
                 "masked_select", "unique"):
        setattr(torch.Tensor, name, counted(f"Tensor.{name}", getattr(torch.Tensor, name)))
    with_device = lambda args, kwargs: kwargs.get("device") is not None  # noqa: E731
    for name in ("tensor", "as_tensor"):
        setattr(torch, name, counted(f"torch.{name}(device=)", getattr(torch, name), with_device))
    for name in ("nonzero", "masked_select", "unique"):
        setattr(torch, name, counted(f"torch.{name}", getattr(torch, name)))
    def to_device(args, kwargs):       # .to(device) / .to("cuda"), blocking
        device = kwargs.get("device", args[1] if len(args) > 1 else None)
        return (device is not None and not isinstance(device, torch.dtype) and not kwargs.get("non_blocking")
                and not (len(args) > 2 and args[2] is True))
    torch.Tensor.to = counted("Tensor.to(device) *", torch.Tensor.to, to_device)
    torch.Tensor.cuda = counted("Tensor.cuda *", torch.Tensor.cuda,
                                lambda args, kwargs: not kwargs.get("non_blocking"))
    torch.cuda.synchronize = counted("torch.cuda.synchronize", torch.cuda.synchronize)
    if torch.distributed.is_available():
        torch.distributed.barrier = counted("torch.distributed.barrier", torch.distributed.barrier)


_BYTES: dict[tuple[str, int], list] = {}


def _count_bytes(state: dict) -> None:
    """HOST_SYNC_BYTES=1: also the bytes every ATen op of the counted iteration reads and writes (its tensor
    inputs and outputs; copy_ reads its source and writes its destination), per engine call and micro-batch.
    Views and bare allocations move nothing; collectives (c10d) are communication, which a one-rank job
    does not show, and are left out."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Bytes(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if state["iteration"] == ITERATION and state["call"]:
                if torch.Tag.view_copy not in func.tags and not _moves_nothing(func):
                    ins = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
                    outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
                    if func.__name__ == "copy_":        # reads the source, writes the destination
                        outs = []
                    moved = sum(t.numel() * t.element_size() for t in ins + outs)
                    row = _BYTES.setdefault((state["call"], state["micro"]), [0, 0])
                    row[0] += moved
                    row[1] += 1
            return out

    Bytes().__enter__()


def _moves_nothing(func) -> bool:
    """A view, an allocation that writes nothing (empty, empty_like, empty_strided), or a collective."""
    return (func.__name__.startswith("empty") or func.namespace == "c10d"
            or any(a.alias_info is not None and not a.alias_info.is_write for a in func._schema.returns))


def install_accelerator() -> None:
    """The same for DeepSpeed's accelerator (its CPU one here), once DeepSpeed is imported."""
    counted = _STATE["counted"]
    from deepspeed.accelerator import cpu_accelerator
    accel = cpu_accelerator.CPU_Accelerator
    accel.synchronize = counted("accelerator.synchronize", accel.synchronize)
    # get_accelerator().LongTensor(list) is torch.cuda.LongTensor(list) on a GPU: made from host data
    from_list = lambda args, kwargs: bool(args) and isinstance(args[0], (list, tuple))  # noqa: E731
    for name in ("LongTensor", "FloatTensor", "IntTensor", "HalfTensor", "BFloat16Tensor", "ByteTensor"):
        made = getattr(torch, name, None)
        if made is not None:
            setattr(accel, name, property(lambda self, made=made, name=name:
                                          counted(f"accelerator.{name}(list)", made, from_list)))


def report(path: str, micro_batches: int) -> None:
    rows = [{"call": c, "kind": k, "site": s, "count": n} for (c, k, s), n in sorted(_COUNTS.items())]
    moved = [{"call": c, "micro_batch": m, "bytes": b, "ops": n} for (c, m), (b, n) in sorted(_BYTES.items())]
    with open(path, "w") as f:
        json.dump({"iteration": ITERATION, "micro_batches": micro_batches, "sites": rows, "bytes": moved}, f,
                  indent=1)
