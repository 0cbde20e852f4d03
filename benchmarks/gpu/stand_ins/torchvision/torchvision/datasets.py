"""Names megatron/data/image_folder.py reads at import (see __init__.py); unused by GPT training."""


class VisionDataset:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("torchvision stand-in: vision datasets are not available")


def __getattr__(name):
    return VisionDataset
