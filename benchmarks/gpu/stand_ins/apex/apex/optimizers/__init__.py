"""apex.optimizers stand-in: FusedAdam as PyTorch's fused AdamW (apex's default adam_w_mode=True is
decoupled weight decay, i.e. AdamW); FusedSGD as torch.optim.SGD."""
import torch


class FusedAdam(torch.optim.AdamW):
    def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8, adam_w_mode=True,
                 weight_decay=0.0, amsgrad=False, set_grad_none=True, **_):
        if not adam_w_mode or not bias_correction or amsgrad:
            raise NotImplementedError("the apex stand-in implements FusedAdam(adam_w_mode=True, "
                                      "bias_correction=True, amsgrad=False) only")
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=True)


class FusedSGD(torch.optim.SGD):
    def __init__(self, params, lr=1e-3, momentum=0.0, weight_decay=0.0, **_):
        super().__init__(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
