"""torchvision stand-in for CPU traces only (benchmarks/gpu/mem_trace): Megatron-DeepSpeed's training.py imports
its vision models at module level (megatron/model/vision/knn_monitor.py -> megatron/data/vit_dataset.py), which
import torchvision; pretrain_gpt.py never calls them. PyPI's torchvision does not load beside the CPU torch build
here ('operator torchvision::nms does not exist'), so these names exist and do nothing."""
from . import datasets, transforms  # noqa: F401


def get_image_backend():
    return "PIL"
