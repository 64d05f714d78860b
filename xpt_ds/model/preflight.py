"""The checks a run makes of its model before any source weight is read (``plan_target``): what the source
cannot take, what the data settings ask of the target planned from the source's config.json, the attention
kernel, and the phases' parameter patterns. A mistyped path or setting is an error in seconds, not after gigabytes
of weights are loaded."""
from __future__ import annotations

from xpt_ds.config import ConfigError, DataConfig, ModelConfig, TrainConfig
from xpt_ds.config.validate import decoder_problems
from xpt_ds.data.tokenizer import TargetTokenizer, tokenizer_for
from xpt_ds.model.build import planned_tags, planned_target, source_config
from xpt_ds.model.decoder import ATTENTION_DROPOUT_KEYS, check_decoder_method, is_decoder
from xpt_ds.model.forward.document_mask import check_window
from xpt_ds.model.phases import check_patterns


def plan_target(cfg: TrainConfig) -> tuple[TargetTokenizer, object]:
    """(tokenizer, the target's HF config) of a run, with every check the model side makes before any
    source weight is read, in the order that fails fast: what the source cannot take (before its tokenizer is
    read), the tokenizer, the target planned from the source's config.json, what the data settings ask of it, and
    the phases' parameter patterns against its parameter names."""
    check_source(cfg.model, cfg.data)
    tok = tokenizer_for(cfg.model, causal=is_decoder(source_config(cfg.model)))
    family, tcfg = planned_target(cfg.model, tok)
    check_data_fits(tcfg, cfg.data)
    if cfg.model.attention == "flex":
        check_window(tcfg, cfg.data.seq_len)
    check_patterns(cfg, planned_tags(cfg.model, family, tcfg))
    return tok, tcfg


def check_source(cfg: ModelConfig, data: DataConfig) -> None:
    """Before the tokenizer is read: a method the source's kind (decoder or masked LM) does not take is the
    error, not what its tokenizer lacks for it (keep_vocab on GPT-2: no mask token); so is a data setting it has
    no use for (a decoder trains on every next token: nothing is masked)."""
    src_cfg = source_config(cfg)
    if is_decoder(src_cfg):
        check_decoder_method(cfg.method, src_cfg.model_type)
        if data.masking != "token":
            raise ConfigError(f"config key 'data.masking' is '{data.masking}', but model.source is a decoder, "
                              "which trains on every next token (nothing is masked); leave it at 'token'")
        found = decoder_problems(cfg, data)  # the other masking keys, which nothing reads for a decoder either
        if found:
            raise ConfigError(found[0])
    if cfg.attention == "flex":
        _check_flex(cfg, src_cfg)


def _check_flex(cfg: ModelConfig, src_cfg) -> None:
    """FlexAttention keeps a decoder's packed documents apart; it has no attention dropout."""
    if not is_decoder(src_cfg):
        raise ConfigError(f"config key 'model.attention' is 'flex', which is for decoder sources; {cfg.source} is a "
                          f"{src_cfg.model_type} masked LM: leave it at 'sdpa'")
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING
    if not getattr(MODEL_FOR_CAUSAL_LM_MAPPING[type(src_cfg)], "_supports_flex_attn", False):
        raise ConfigError(f"config key 'model.attention' is 'flex', but transformers has no FlexAttention for "
                          f"{src_cfg.model_type}: leave it at 'sdpa'")
    source_p = max((getattr(src_cfg, k, 0) or 0 for k in ATTENTION_DROPOUT_KEYS), default=0)
    p = cfg.dropout if cfg.dropout >= 0 else source_p
    if p > 0:
        raise ConfigError(f"config key 'model.attention' is 'flex', which has no attention dropout, but the model's "
                          f"is {p} ({'model.dropout' if cfg.dropout >= 0 else 'the source config'}); set "
                          "model.dropout: 0")


def check_data_fits(tcfg, data: DataConfig) -> None:
    """What the data settings ask of the target model (``planned_target``'s config): rows within the positions
    the source trained, and for a decoder the separator its document boundaries come from."""
    if data.seq_len > tcfg.xpt_max_length:
        raise ConfigError(f"config key 'data.seq_len' is {data.seq_len}; the source model's positions "
                          f"allow at most {tcfg.xpt_max_length}")
    if is_decoder(tcfg) and not data.doc_separator:
        raise ConfigError("config key 'data.doc_separator' is false, but a decoder source needs the separator "
                          "to find document boundaries (position restarts, no attention across documents)")
