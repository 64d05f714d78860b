"""Houlsby bottleneck adapters (Houlsby et al. 2019), the paper's Adapters baseline (002 §4.2).

This file is self-contained (torch + transformers only): ``xpt_ds.cli.export`` copies it next to an
exported adapters model as ``xpt_adapters.py`` and points ``config.auto_map`` at its classes (``auto_map()``), so
stock ``AutoModel*.from_pretrained(DIR, trust_remote_code=True)`` rebuilds the adapters for the masked LM and
for every task head fine-tuning uses.
"""
import types

import torch
import transformers
from torch import nn


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
    base = getattr(model, model.base_model_prefix, model)  # a task model's encoder, or the bare BertModel
    for layer in base.encoder.layer:
        for out in (layer.attention.output, layer.output):
            out.adapter = Adapter(out.dense.out_features, bottleneck)
            out.forward = types.MethodType(_output_with_adapter, out)


# The Auto* factory each head answers to, and its stock class name after the family's prefix.
HEADS = {"AutoModel": "Model", "AutoModelForMaskedLM": "ForMaskedLM",
         "AutoModelForSequenceClassification": "ForSequenceClassification",
         "AutoModelForTokenClassification": "ForTokenClassification",
         "AutoModelForQuestionAnswering": "ForQuestionAnswering", "AutoModelForMultipleChoice": "ForMultipleChoice"}
FAMILIES = {"bert": "Bert", "roberta": "Roberta", "xlm-roberta": "XLMRoberta", "camembert": "Camembert"}


def _with_adapters(stock: type) -> type:
    def __init__(self, config):
        stock.__init__(self, config)
        add_adapters(self, config.xpt_adapter_size)

    return type(f"XptAdapter{stock.__name__}", (stock,), {"__init__": __init__, "__module__": __name__})


# XptAdapterBertForMaskedLM, XptAdapterRobertaForSequenceClassification, ... as module attributes: auto_map
# names them as "xpt_adapters.CLASS".
for _prefix in FAMILIES.values():
    for _suffix in HEADS.values():
        _cls = _with_adapters(getattr(transformers, _prefix + _suffix))
        globals()[_cls.__name__] = _cls


def auto_map(model_type: str) -> dict[str, str]:
    """``config.auto_map`` of an exported adapters model of ``model_type`` (a FAMILIES key)."""
    prefix = FAMILIES[model_type]
    return {auto: f"xpt_adapters.XptAdapter{prefix}{suffix}" for auto, suffix in HEADS.items()}
