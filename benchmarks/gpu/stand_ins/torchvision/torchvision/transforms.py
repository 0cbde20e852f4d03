"""Names megatron/data/vit_dataset.py reads at import (see __init__.py); unused by GPT training."""


class _Unused:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("torchvision stand-in: vision transforms are not available")


def __getattr__(name):
    return _Unused
