"""Whether a source checkpoint is the architecture xpt-ds builds for it.

xpt-ds builds the stock ``transformers`` class of a source's ``model_type`` and never runs code a model directory
ships (``auto_map`` in its config.json). Some checkpoints keep a stock ``model_type`` for their own modelling code
(MosaicBERT's maps AutoModelForMaskedLM to ``bert_layers.BertForMaskedLM``, ALiBi in place of position embeddings):
the stock class loads the weights whose names it knows and draws the rest at random, and before this check training
went on with a warning.
So:
- a source that lacks weights of the parts XPT keeps (anything but the LM head, which an encoder-only checkpoint
  such as a ``BertModel`` lacks by design) is one error line;
- a source whose config.json names its own model code is one error line if it holds weights the stock class leaves
  unused (its own layers), and otherwise trains as the stock class, with one warning line that says so.
A quantized checkpoint (config.json's ``quantization_config``: FP8 codes with ``weight_scale_inv``, bitsandbytes'
packed 4-bit weights, GPTQ, AWQ, ...) holds codes and scales, not the weights: read as they are stored, FP8 codes
came in as values up to 448 and packed 4-bit weights as a shape error. It is refused when its config.json is read
(``check_not_quantized``), before any weight; a GGUF file is not, as transformers dequantizes it.
"""
from __future__ import annotations

import logging

from xpt_ds.config import ConfigError

log = logging.getLogger(__name__)


def own_code(src_cfg) -> dict[str, str]:
    """The model classes the source's config.json maps to code it ships: {'AutoModelForMaskedLM': 'mod.Class'}."""
    auto_map = getattr(src_cfg, "auto_map", None) or {}
    return {k: str(v) for k, v in auto_map.items() if k.startswith("AutoModel")}


def checked_missing(source: str, src_cfg, class_name: str, missing: set[str], unexpected: set[str],
                    head: tuple[str, ...]) -> set[str]:
    """The weights ``source``'s checkpoint lacks (``missing``, of the stock class ``class_name``), all of them in
    the LM head (parameter names starting with one of ``head``); otherwise a ConfigError naming the source, the
    first weight and the code its config.json names. ``unexpected``: the checkpoint's weights the stock class does
    not use."""
    missing = set(missing)
    lost = sorted(k for k in missing if not k.startswith(head))
    code = own_code(src_cfg)
    unused = sorted(unexpected) if code else []  # a plain checkpoint may carry other heads' weights
    stock = f"stock {class_name}"
    named = "; ".join(f"{k} -> {v}" for k, v in sorted(code.items()))
    if lost or unused:
        why = (f"lacks {len(lost)} weight(s) the {stock} needs beyond its LM head (first: {lost[0]}), which would "
               "start random" if lost else
               f"holds {len(unused)} weight(s) the {stock} does not use (first: {unused[0]})")
        ships = (f"; its config.json names its own model code ({named}), which xpt-ds does not run" if code
                 else "")
        raise ConfigError(f"config key 'model.source': {source} {why}: it is not the {src_cfg.model_type} "
                          f"architecture transformers defines{ships}")
    if code:
        log.warning("source %s: its config.json names its own model code (%s), which xpt-ds does not run; the %s "
                    "loaded every weight it holds, and it trains as that", source, named, stock)
    return missing


def check_not_quantized(source: str, src_cfg) -> None:
    """One error line naming ``source`` and its quant_method when its config.json has a ``quantization_config``."""
    quant = getattr(src_cfg, "quantization_config", None)
    if quant is None:
        return
    method = quant.get("quant_method") if isinstance(quant, dict) else getattr(quant, "quant_method", None)
    method = getattr(method, "value", method)  # transformers' QuantizationMethod enum
    raise ConfigError(f"config key 'model.source': {source} is a quantized checkpoint (quant_method {method}): its "
                      "files hold codes and scales, not the weights; give the unquantized model")
