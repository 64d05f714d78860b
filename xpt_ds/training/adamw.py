"""``optim.torch_adam``'s optimizer: torch's AdamW, stepped a slice of at most ``CHUNK`` elements at a time.

Under ZeRO the optimizer holds each param group as one flat fp32 partition, and torch's single-tensor AdamW step
makes two temporaries of a parameter's whole size (``exp_avg_sq.sqrt()`` and the division by its bias correction):
at the Qwen2.5-0.5B shape (394,890,880 parameters) one step of a flat tensor rose from 6.17 GiB resident to a
9.12 GiB peak. Every operation of the step is elementwise, so torch's own ``adam`` on each slice gives the whole
tensor's values bit for bit (``tests/training/test_adamw.py``, on 1 and 2 threads), with temporaries of one slice:
the same step peaked at 6.30 GiB.
"""
from __future__ import annotations

import torch
from torch.optim.adam import adam

CHUNK = 1 << 24  # elements: 64 MB of fp32 a temporary


class ChunkedAdamW(torch.optim.AdamW):
    """``torch.optim.AdamW(foreach=False)``, its state and results, one parameter and one slice at a time."""

    chunk = CHUNK

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps = [], [], [], [], [], []
            has_complex = self._init_group(group, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps)
            for i, param in enumerate(params):
                tensors = [param, grads[i], exp_avgs[i], exp_avg_sqs[i], *max_exp_avg_sqs[i:i + 1]]
                counted = steps[i].clone()  # each slice steps from the same count; the count goes on once
                for part in _slices(tensors, self.chunk):
                    steps[i].copy_(counted)
                    adam([part[0]], [part[1]], [part[2]], [part[3]], part[4:], [steps[i]], foreach=False,
                         capturable=group["capturable"], differentiable=group["differentiable"],
                         fused=group["fused"], grad_scale=getattr(self, "grad_scale", None),
                         found_inf=getattr(self, "found_inf", None), has_complex=has_complex,
                         decoupled_weight_decay=group["decoupled_weight_decay"], amsgrad=group["amsgrad"],
                         beta1=group["betas"][0], beta2=group["betas"][1], lr=group["lr"],
                         weight_decay=group["weight_decay"], eps=group["eps"], maximize=group["maximize"])
        return loss


def _slices(tensors: list[torch.Tensor], chunk: int) -> list[list[torch.Tensor]]:
    """``tensors`` (a parameter, its gradient and state, all of one shape) as slices of at most ``chunk``
    elements; whole where they are smaller, or not contiguous (no flat view)."""
    n = tensors[0].numel()
    if n <= chunk or not all(t.is_contiguous() for t in tensors):
        return [tensors]
    flat = [t.view(-1) for t in tensors]
    return [[t[start:start + chunk] for t in flat] for start in range(0, n, chunk)]
