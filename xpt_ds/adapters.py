"""Houlsby bottleneck adapters (Houlsby et al. 2019), the paper's Adapters baseline (002 §4.2).

This file is self-contained (torch + transformers only): ``xpt_ds.export`` copies it next to an
exported adapters model as ``xpt_adapters.py`` and points ``config.auto_map`` at it, so stock
``AutoModelForMaskedLM.from_pretrained(DIR, trust_remote_code=True)`` rebuilds the adapters.
"""
import types

import torch
from torch import nn
from transformers import BertForMaskedLM, RobertaForMaskedLM


class Adapter(nn.Module):
    """x + up(gelu(down(x))); ``up`` starts at zero so a fresh adapter is the identity."""

    def __init__(self, hidden_size: int, bottleneck: int):
        super().__init__()
        self.down = nn.Linear(hidden_size, bottleneck)
        self.up = nn.Linear(bottleneck, hidden_size)
        nn.init.normal_(self.down.weight, std=1e-3)
        nn.init.zeros_(self.down.bias)
        nn.init.zeros_(self.up.weight)
        nn.init.zeros_(self.up.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.up(nn.functional.gelu(self.down(x)))


def _output_with_adapter(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
    # Same as Bert/RobertaSelfOutput and *Output, with the adapter before the residual + LayerNorm.
    hidden_states = self.adapter(self.dropout(self.dense(hidden_states)))
    return self.LayerNorm(hidden_states + input_tensor)


def add_adapters(model: nn.Module, bottleneck: int) -> None:
    """Two adapters per encoder layer: after attention and after the feed-forward block."""
    base = getattr(model, model.base_model_prefix)
    for layer in base.encoder.layer:
        for out in (layer.attention.output, layer.output):
            out.adapter = Adapter(out.dense.out_features, bottleneck)
            out.forward = types.MethodType(_output_with_adapter, out)


class XptAdapterBertForMaskedLM(BertForMaskedLM):
    def __init__(self, config):
        super().__init__(config)
        add_adapters(self, config.xpt_adapter_size)


class XptAdapterRobertaForMaskedLM(RobertaForMaskedLM):
    def __init__(self, config):
        super().__init__(config)
        add_adapters(self, config.xpt_adapter_size)
