"""TreLM (004 §3.1) for stock transformers: the target-language model of a ``method: trelm`` run.

This file is self-contained (torch + transformers only): ``xpt_ds.cli.export`` copies it next to an exported trelm
model as ``xpt_trelm.py`` and points ``config.auto_map`` at its classes (``auto_map()``), so stock
``AutoModel*.from_pretrained(DIR, trust_remote_code=True)`` runs the TRILayer in the masked LM and in every
task head fine-tuning uses. The stock class without ``trust_remote_code`` loads the model *without* it.

The export reads and writes the target language in its own order (004's MLM with the identity alignment), which
is what fine-tuning and target MLM need. With input and output language both the target:

- The input language row is folded into the token-type rows: E_wrd + E_lng + E_seg + E_pos = E_wrd + (E_seg +
  E_lng) + E_pos, so the embeddings are stock (every token type of the input is the target language).
- The TRILayer is not folded: the stock encoder has no layer for it, and its input adds the output language row
  and the position rows, H~ + E_lng + E_pos (positions 0..T-1 from the model's first position row, as in
  training). It runs as the first step of layer N/2's forward, on that layer's arguments (attention mask and
  all), from ``trelm.trilayer`` and ``trelm.output_language`` on the base model.
- Dropped: the English vocabulary (``source_word_embeddings``, ``source_lm_bias``), the English language row
  and the placeholder. They serve English input and CdLM's reordering, which a plain token sequence never
  uses; continue from the run's checkpoint for those.
"""
import copy
import types

import torch
import transformers
from torch import nn


class TreLMStep(nn.Module):
    """The TRILayer (a layer of the encoder's own class) and the output language row added to its input."""

    def __init__(self, template: nn.Module, hidden_size: int):
        super().__init__()
        self.trilayer = copy.deepcopy(template)  # the class and shapes; the values come from the checkpoint
        self.output_language = nn.Parameter(torch.zeros(hidden_size))


def _trilayer_then_layer(self, hidden_states: torch.Tensor, attention_mask=None, *args, **kwargs):
    """Layer N/2's forward with the TRILayer first: layer(TRILayer(H~ + E_lng + E_pos), ...)."""
    base = self.__dict__["_xpt_base"]
    positions = base.config.xpt_position_offset + torch.arange(hidden_states.shape[1], device=hidden_states.device)
    x = hidden_states + base.trelm.output_language + base.embeddings.position_embeddings(positions)[None]
    out = base.trelm.trilayer(x, attention_mask, *args, **kwargs)
    x = out[0] if isinstance(out, tuple) else out  # transformers 4.x layers return a tuple, 5.x a tensor
    return type(self).forward(self, x, attention_mask, *args, **kwargs)


def add_trilayer(base: nn.Module) -> None:
    """Give a stock Bert/RobertaModel its TRILayer between encoder layers N/2 - 1 and N/2."""
    layers = base.encoder.layer
    half = len(layers) // 2
    base.trelm = TreLMStep(layers[half - 1], base.config.hidden_size)
    # A plain attribute, not a submodule (that would be a cycle); deepcopy maps it to the copied base.
    layers[half].__dict__["_xpt_base"] = base
    layers[half].forward = types.MethodType(_trilayer_then_layer, layers[half])


# The Auto* factory each head answers to, and its stock class name after the family's prefix.
HEADS = {"AutoModel": "Model", "AutoModelForMaskedLM": "ForMaskedLM",
         "AutoModelForSequenceClassification": "ForSequenceClassification",
         "AutoModelForTokenClassification": "ForTokenClassification",
         "AutoModelForQuestionAnswering": "ForQuestionAnswering", "AutoModelForMultipleChoice": "ForMultipleChoice"}
FAMILIES = {"bert": "Bert", "roberta": "Roberta", "xlm-roberta": "XLMRoberta", "camembert": "Camembert"}


def _with_trilayer(stock: type) -> type:
    def __init__(self, config, *args, **kwargs):
        stock.__init__(self, config, *args, **kwargs)
        add_trilayer(getattr(self, self.base_model_prefix, self))  # a task model's encoder, or the bare model

    return type(f"XptTreLM{stock.__name__}", (stock,), {"__init__": __init__, "__module__": __name__})


# XptTreLMBertForMaskedLM, XptTreLMRobertaModel, ... as module attributes: auto_map names them as
# "xpt_trelm.CLASS".
for _prefix in FAMILIES.values():
    for _suffix in HEADS.values():
        _cls = _with_trilayer(getattr(transformers, _prefix + _suffix))
        globals()[_cls.__name__] = _cls


def auto_map(model_type: str) -> dict[str, str]:
    """``config.auto_map`` of an exported trelm model of ``model_type`` (a FAMILIES key)."""
    prefix = FAMILIES[model_type]
    return {auto: f"xpt_trelm.XptTreLM{prefix}{suffix}" for auto, suffix in HEADS.items()}
