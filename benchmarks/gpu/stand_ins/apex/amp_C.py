"""amp_C stand-in (apex's compiled multi-tensor ops): the two Megatron-DeepSpeed calls, on torch._foreach."""
import torch


def multi_tensor_l2norm(chunk_size, noop_flag, tensor_lists, per_tensor, *_):
    norms = torch._foreach_norm([t.float() for t in tensor_lists[0]]) if tensor_lists[0] else []
    total = torch.linalg.vector_norm(torch.stack(norms)) if norms else torch.zeros((), device=noop_flag.device)
    return total.reshape(1), (torch.stack(norms) if per_tensor and norms else None)


def multi_tensor_scale(chunk_size, noop_flag, tensor_lists, scale):
    src, dst = tensor_lists
    for s, d in zip(src, dst):
        d.copy_(s * scale)
