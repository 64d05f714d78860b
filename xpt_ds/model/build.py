"""Build the ITL-extended target model from an English *ForMaskedLM checkpoint (002 §3, eq. 7-10).

An XPT model is structurally a stock Bert/RobertaForMaskedLM with C+2 layers: layer 0 is ITL_in,
layers 1..C are the reused source encoder layers, layer C+1 is ITL_out. Export is therefore a plain
``save_pretrained``. Every parameter carries tags (``@new``, ``@source``, ``@embeddings``, ``@itl``,
``@lower``/``@upper`` (halves of the source layers), ...) that phase patterns select on.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForMaskedLM

from xpt_ds.config import ConfigError, DataConfig, ModelConfig
from xpt_ds.config.methods import METHODS
from xpt_ds.data.tokenizer import TargetTokenizer
from xpt_ds.embedding_init.context import InitContext, kept_vocabulary_report
from xpt_ds.embedding_init.registry import init_embeddings
from xpt_ds.errors import UserError
from xpt_ds.io.trust import reading_weights
from xpt_ds.model.adapters import add_adapters
from xpt_ds.model.decoder import (
    DECODER_FAMILIES,
    build_decoder,
    check_decoder_method,
    decoder_skeleton,
    drop_source_code,
    is_decoder,
    load_decoder_source,
    source_location,
)
from xpt_ds.model.decoder import tag_parameters as decoder_tag_parameters
from xpt_ds.model.decoder import target_config as decoder_target_config
from xpt_ds.model.source_weights import checked_missing
from xpt_ds.trelm.model import add_trelm, init_trelm, trelm_tags

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Family:
    base: str  # attribute of the base model
    head_dense: str
    head_norm: str
    head_bias: str
    offset_positions: bool  # RoBERTa: position id = padding_idx + 1 + i


FAMILIES = {
    "bert": Family("bert", "cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm",
                   "cls.predictions.bias", offset_positions=False),
    "roberta": Family("roberta", "lm_head.dense", "lm_head.layer_norm", "lm_head.bias", offset_positions=True),
}
FAMILIES["xlm-roberta"] = FAMILIES["camembert"] = FAMILIES["roberta"]


@dataclass
class BuiltModel:
    model: nn.Module | None  # a stock *ForMaskedLM (plus adapters for method=adapters), or *ForCausalLM (decoder
    # source); None once the trainer's engine owns it
    family: Family | object  # a decoder source's: xpt_ds.model.decoder.DecoderFamily
    tags: dict[str, set[str]]  # parameter name -> tags
    embedding_init: dict | None  # the embedding_init report (xpt_ds.embedding_init.registry.Rows.report); None
    # when build_model did not run the strategy (init_embeddings_rows=False)


def load_source(cfg: ModelConfig):
    """(the English model, the names of the MLM weights its checkpoint lacks); random weights of the same
    shape for a method whose source is 'random'. Random values (missing weights such as the MLM head of an
    encoder-only checkpoint, which ``from_pretrained`` draws from torch's global generator, or the whole
    random source) come from ``init_seed + 1``: every rank, every rerun and the probe get the same source. The
    global RNG state is left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.init_seed + 1)
        return _load_source(cfg)


def source_config(cfg: ModelConfig):
    """``model.source``'s config (config.json only, no weights); one error line naming it if it cannot be read.
    Read once per process and source (a copy each call): from a GGUF file, transformers parses the whole
    header, seconds for SmolLM2-135M, and the trainer asks for it more than once. A local file is read again
    once it changes."""
    location, gguf = source_location(cfg.source)
    local = Path(location) / gguf.get("gguf_file", "config.json")
    stat = local.stat() if local.is_file() else None
    stamp = None if stat is None else (stat.st_mtime_ns, stat.st_size)
    return copy.deepcopy(_source_config(cfg.source, stamp))


@functools.lru_cache(maxsize=4)
def _source_config(src: str, stamp: tuple | None):
    location, gguf = source_location(src)  # a GGUF file: its directory and {gguf_file: name}
    try:
        return AutoConfig.from_pretrained(location, trust_remote_code=False, **gguf)
    except ImportError as e:  # transformers reads GGUF through the gguf package
        raise ConfigError(f"config key 'model.source': reading {src} needs the gguf package "
                          f"(pip install gguf): {str(e).strip().splitlines()[0]}") from None
    except (OSError, ValueError) as e:
        if not Path(src).exists() and (src.startswith(("/", "./", "../", "~")) or src.count("/") > 1):
            raise ConfigError(f"config key 'model.source': no such directory: {src} (a hub id is 'org/name')") \
                from None  # a path, not a hub id: transformers' own message speaks of repo ids
        if Path(location).is_dir() and not gguf and not (Path(location) / "config.json").is_file():
            raise ConfigError(f"config key 'model.source': {src} has no config.json (a model directory holds it "
                              "beside the weights, as save_pretrained writes them)") from None
        where = "local directory" if Path(src).exists() else "hub id or path"
        raise ConfigError(f"config key 'model.source': cannot load '{src}' ({where}): "
                          f"{str(e).strip().splitlines()[0]}") from None


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


def planned_tags(cfg: ModelConfig, family, tcfg) -> dict[str, set[str]]:
    """The parameters ``planned_target``'s config builds, on the meta device (no memory, no weights), each with
    the tags it may carry: which weights come from the source depends on what its files hold, so every one
    carries both @source and @new. A phase pattern that matches nothing here matches nothing in the built model
    (``phases.check_patterns``: the check before the load)."""
    with torch.device("meta"), torch.random.fork_rng(devices=[]):
        model = build_skeleton(tcfg, blank=True)
    method = METHODS[cfg.method]
    layers = tcfg.num_hidden_layers - (2 if method.has_itl else 0)
    tag = decoder_tag_parameters if is_decoder(tcfg) else _tag_parameters
    tags = {n: t | {"@source"} for n, t in tag(model, family, set(), layers, method.has_itl).items()}
    return {n: t | trelm_tags(n) for n, t in tags.items()} if method.trelm else tags


def check_data_fits(tcfg, data: DataConfig) -> None:
    """What the data settings ask of the target model (``planned_target``'s config): rows within the positions
    the source trained, and for a decoder the separator its document boundaries come from."""
    if data.seq_len > tcfg.xpt_max_length:
        raise ConfigError(f"config key 'data.seq_len' is {data.seq_len}; the source model's positions "
                          f"allow at most {tcfg.xpt_max_length}")
    if is_decoder(tcfg) and not data.doc_separator:
        raise ConfigError("config key 'data.doc_separator' is false, but a decoder source needs the separator "
                          "to find document boundaries (position restarts, no attention across documents)")


def _check_encoder_source(cfg: ModelConfig, src_cfg) -> None:
    if METHODS[cfg.method].lora:
        raise ConfigError(f"config key 'model.method': lora is for decoder sources "
                          f"({', '.join(sorted(DECODER_FAMILIES))}); {cfg.source} is a {src_cfg.model_type} masked "
                          "LM (its parameter-efficient baseline is method adapters)")
    if src_cfg.model_type not in FAMILIES:
        raise ConfigError(f"config key 'model.source': model_type '{src_cfg.model_type}' is not supported "
                          f"(valid: {', '.join(sorted(FAMILIES))} (masked LMs); "
                          f"{', '.join(sorted(DECODER_FAMILIES))} (causal LMs))")


def _load_source(cfg: ModelConfig):
    src = cfg.source
    src_cfg = source_config(cfg)
    if is_decoder(src_cfg):
        return load_decoder_source(src, src_cfg, cfg.method)
    _check_encoder_source(cfg, src_cfg)
    if METHODS[cfg.method].source == "random":
        return AutoModelForMaskedLM.from_config(src_cfg), set()
    with reading_weights(f"config key 'model.source': {src}", ConfigError):
        model, info = AutoModelForMaskedLM.from_pretrained(src, output_loading_info=True, trust_remote_code=False)
    head = FAMILIES[src_cfg.model_type].head_dense.split(".")[0] + "."  # cls. (BERT) or lm_head. (RoBERTa)
    missing = checked_missing(src, src_cfg, model, info, (head,))
    if missing:
        log.warning("source %s lacks %d MLM weights (%s...); they start fresh and count as @new", src,
                    len(missing), sorted(missing)[0])
    return model, missing


def _target_config(src_cfg, cfg: ModelConfig, tok: TargetTokenizer):
    tcfg = copy.deepcopy(src_cfg)
    drop_source_code(tcfg)
    tcfg.vocab_size = tok.vocab_size
    if METHODS[cfg.method].vocab == "source":  # the source's rows as they are (some checkpoints pad the matrix)
        if tok.vocab_size > src_cfg.vocab_size:
            raise ConfigError(f"tokenizer {tok.path} has {tok.vocab_size} entries but model.source has only "
                              f"{src_cfg.vocab_size} embedding rows: it is not the source's tokenizer")
        tcfg.vocab_size = src_cfg.vocab_size
    tcfg.num_hidden_layers = src_cfg.num_hidden_layers + (2 if METHODS[cfg.method].has_itl else 0)
    tcfg.pad_token_id, tcfg.bos_token_id, tcfg.eos_token_id = tok.pad_id, tok.cls_id, tok.sep_id
    tcfg.tie_word_embeddings = True
    tcfg.xpt_method = cfg.method
    # Longest input that stays on position rows the source trained (RoBERTa starts at pad + 1).
    offset = src_cfg.pad_token_id + 1 if FAMILIES[src_cfg.model_type].offset_positions else 0
    tcfg.xpt_max_length = src_cfg.max_position_embeddings - offset
    if cfg.dropout >= 0:
        tcfg.hidden_dropout_prob = tcfg.attention_probs_dropout_prob = cfg.dropout
    if METHODS[cfg.method].adapters:
        tcfg.xpt_adapter_size = cfg.adapter_size
    if METHODS[cfg.method].trelm:  # the English vocabulary beside the target's (xpt_ds.trelm.model)
        tcfg.xpt_trelm_source_vocab_size, tcfg.xpt_trelm_source_pad_id = src_cfg.vocab_size, src_cfg.pad_token_id
        tcfg.xpt_position_offset = tok.pad_id + 1 if FAMILIES[src_cfg.model_type].offset_positions else 0
    return tcfg


def _copy_position_rows(dst: nn.Embedding, src: nn.Embedding, dst_pad: int, src_pad: int, offset: bool) -> None:
    """RoBERTa puts token i on row pad+1+i, so a different target pad id shifts every row.

    Copy so that the target's row for position i is the source's row for position i.
    """
    shift = (dst_pad - src_pad) if offset else 0  # target row r <- source row r - shift
    lo, hi = max(0, shift), min(dst.weight.shape[0], src.weight.shape[0] + shift)
    with torch.no_grad():
        dst.weight[lo:hi].copy_(src.weight[lo - shift:hi - shift])


def build_model(cfg: ModelConfig, tok: TargetTokenizer, data: DataConfig | None = None,
                init_embeddings_rows: bool = True) -> BuiltModel:
    """Target model with reused source parameters copied bit-exactly. Every random value comes from
    ``cfg.init_seed`` (the source's missing or random weights from init_seed + 1, the target's from init_seed),
    so ranks and reruns build the same weights; the global RNG state is left as it was. ``data`` gives the
    training shards to the embedding_init strategies that count pieces (frequency_rank).

    ``init_embeddings_rows=False`` (a resume: a checkpoint overwrites every weight) leaves the new word embeddings
    as the skeleton drew them instead of running ``model.embedding_init``, which may read every training shard or
    files that are gone; the report is then None. The strategy has its own generator, so nothing else changes."""
    method = METHODS[cfg.method]
    src, missing = load_source(cfg)
    src_cfg = src.config
    if is_decoder(src_cfg):
        model, family, tags, report = build_decoder(cfg, tok, src, missing, data, init_embeddings_rows)
        return BuiltModel(model=model, family=family, tags=tags, embedding_init=report)
    with torch.random.fork_rng(devices=[]):
        family = FAMILIES[src_cfg.model_type]
        tcfg = _target_config(src_cfg, cfg, tok)
        torch.manual_seed(cfg.init_seed)
        model = build_skeleton(tcfg)
        if method.vocab == "source":  # the source's rows, all of them, copied by _copy_source
            _check_kept_vocabulary(cfg)
            report = kept_vocabulary_report(tok.vocab_size)
        elif not init_embeddings_rows:
            report = None
        else:
            ctx = InitContext(tok, src.get_input_embeddings().weight.detach().float().clone(), cfg.source,
                              torch.Generator().manual_seed(cfg.init_seed), src_cfg.initializer_range, {},
                              list(data.train_shards) if data else [], data.on_corrupt_shard if data else "fail")
            matrix, report = init_embeddings(cfg.embedding_init, cfg.embedding_init_args, ctx)
            with torch.no_grad():
                _base(model, family).embeddings.word_embeddings.weight.copy_(matrix)
        copied = set() if method.source == "none" else _copy_source(src, model, family, cfg, tok)
        if method.trelm:
            copied |= init_trelm(model, src, cfg.init_seed)
    copied -= missing
    tags = _tag_parameters(model, family, copied, src_cfg.num_hidden_layers, method.has_itl)
    if method.trelm:
        tags = {name: t | trelm_tags(name) for name, t in tags.items()}
    return BuiltModel(model=model, family=family, tags=tags, embedding_init=report)


def _check_kept_vocabulary(cfg: ModelConfig) -> None:
    if METHODS[cfg.method].vocab == "source" and (cfg.embedding_init != "random" or cfg.embedding_init_args):
        raise ConfigError(f"config key 'model.embedding_init': method {cfg.method} keeps the source's word "
                          "embeddings; leave embedding_init at its default")


def planned_target(cfg: ModelConfig, tok: TargetTokenizer):
    """(family, the target model's HF config) from ``model.source``'s config.json and the tokenizer alone, no
    weights: what ``build_model`` and ``build_for_resume`` build. The trainer checks the data against it before
    it reads gigabytes of source weights (a shard path's typo is an error in seconds, not after the load)."""
    src_cfg = source_config(cfg)
    if is_decoder(src_cfg):
        check_decoder_method(cfg.method, src_cfg.model_type)
        return DECODER_FAMILIES[src_cfg.model_type], decoder_target_config(src_cfg, cfg, tok)
    _check_encoder_source(cfg, src_cfg)
    _check_kept_vocabulary(cfg)
    return FAMILIES[src_cfg.model_type], _target_config(src_cfg, cfg, tok)


def build_for_resume(cfg: ModelConfig, tok: TargetTokenizer, tags: dict) -> BuiltModel | None:
    """A resumed run's model without the source's weights: the architecture ``build_model`` makes (from
    ``model.source``'s config.json, the tokenizer and the run config), the parameter tags the checkpoint recorded
    (``tags``: name -> list of tags; which weights came from the source depends on what the source's files held),
    and a blank skeleton (``build_skeleton``'s ``blank``: NaN), which the checkpoint then overwrites, every one. A
    resume thereby neither reads gigabytes of source weights on every rank nor needs them still there, nor draws
    random values it throws away. None when this config builds other parameter names than the checkpoint's
    (another method or source): ``build_model`` then runs, and the resume's model check names the difference."""
    family, tcfg = planned_target(cfg, tok)
    with torch.random.fork_rng(devices=[]):  # the global generator as it was, whatever a module's constructor draws
        model = build_skeleton(tcfg, blank=True)  # the checkpoint sets every weight
    if {n for n, _ in model.named_parameters()} != set(tags):
        return None
    return BuiltModel(model=model, family=family, tags={n: set(t) for n, t in tags.items()}, embedding_init=None)


def saved_tags(tags: dict[str, set[str]]) -> dict[str, list[str]]:
    """The tags as a checkpoint's client state keeps them (plain lists, read back without unpickling code)."""
    return {name: sorted(t) for name, t in tags.items()}


def build_skeleton(tcfg, blank: bool = False) -> nn.Module:
    """The target architecture from its HF config (fp32, SDPA); adapters when the config asks for them.
    ``blank``: the caller sets every parameter next (a resume, a phase hand-over, an export), so the random init is
    skipped (seconds a rank for a large model, on every resume and phase switch) and every parameter holds NaN
    until then: one left unset cannot pass unnoticed. Buffers keep the values the modules' constructors give."""
    with _no_init_weights() if blank else contextlib.nullcontext():
        model = decoder_skeleton(tcfg) if is_decoder(tcfg) else _encoder_skeleton(tcfg)
    if blank:
        model.tie_weights()  # init_weights ties a tied head, and the blank build skipped it
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(float("nan"))
    return model


def _encoder_skeleton(tcfg) -> nn.Module:
    model = AutoModelForMaskedLM.from_config(copy.deepcopy(tcfg), attn_implementation="sdpa").float()
    if getattr(tcfg, "xpt_adapter_size", None):
        add_adapters(model, tcfg.xpt_adapter_size)
    if getattr(tcfg, "xpt_trelm_source_vocab_size", None):
        add_trelm(model)
    return model


def _no_init_weights():
    """transformers' context that skips torch.nn.init and ``init_weights``."""
    from transformers.initialization import no_init_weights
    return no_init_weights()


class StateMismatch(UserError, RuntimeError):
    """A saved state dict does not fit the model its config builds."""


def load_fp32_state(model: nn.Module, state: dict, where: str, assign: bool = False) -> None:
    """Load a full fp32 state dict; only tied weights may be absent (the MLM decoder weight/bias alias the
    embeddings and the head bias; a tied causal LM head aliases the input embeddings). Anything else missing or
    extra is an error naming ``where``. ``assign``: the parameters become ``state``'s tensors instead of copies
    (one model's worth of host memory less; the caller gives up its own use of them)."""
    tied = ({n for n, _ in model.named_parameters(remove_duplicate=False)}  # before ``assign`` unties them
            - {n for n, _ in model.named_parameters()})
    result = model.load_state_dict(state, strict=False, assign=assign)
    missing = [k for k in result.missing_keys if k not in tied and not k.endswith(("decoder.weight", "decoder.bias"))]
    if missing or result.unexpected_keys:
        raise StateMismatch(f"{where} does not match its model: missing {missing[:5]}, "
                           f"unexpected {result.unexpected_keys[:5]}")
    model.tie_weights()


def _base(model: nn.Module, family: Family) -> nn.Module:
    return getattr(model, family.base)


def _copy_source(src, model, family: Family, cfg: ModelConfig, tok: TargetTokenizer) -> set[str]:
    """Copy reused parameters; return the set of target parameter names that came from the source."""
    sb, tb = _base(src, family), _base(model, family)
    off = 1 if METHODS[cfg.method].has_itl else 0
    C = src.config.num_hidden_layers
    pairs = [(f"encoder.layer.{i + off}", sb.encoder.layer[i], tb.encoder.layer[i + off]) for i in range(C)]
    emb = tb.embeddings
    pairs += [("embeddings.token_type_embeddings", sb.embeddings.token_type_embeddings, emb.token_type_embeddings),
              ("embeddings.LayerNorm", sb.embeddings.LayerNorm, emb.LayerNorm)]
    copied = set()
    with torch.no_grad():
        for prefix, s, t in pairs:
            result = t.load_state_dict(s.state_dict(), strict=False)  # strict=False: adapters are extra
            assert not result.unexpected_keys and all(".adapter." in k for k in result.missing_keys), result
            copied |= {f"{family.base}.{prefix}.{n}" for n, _ in t.named_parameters()
                       if ".adapter." not in f".{n}"}
        _copy_position_rows(emb.position_embeddings, sb.embeddings.position_embeddings, tok.pad_id,
                            src.config.pad_token_id, family.offset_positions)
        copied.add(f"{family.base}.embeddings.position_embeddings.weight")
        for path in (family.head_dense, family.head_norm):
            model.get_submodule(path).load_state_dict(src.get_submodule(path).state_dict())
            copied |= {f"{path}.{n}" for n, _ in model.get_submodule(path).named_parameters()}
        if METHODS[cfg.method].vocab == "source":  # 003 [lang->en][lang]: source word embeddings and head bias
            emb.word_embeddings.load_state_dict(sb.embeddings.word_embeddings.state_dict())
            model.get_parameter(family.head_bias).copy_(src.get_parameter(family.head_bias))
            copied |= {f"{family.base}.embeddings.word_embeddings.weight", family.head_bias}
        if off and cfg.itl_init == "copy":
            tb.encoder.layer[0].load_state_dict(sb.encoder.layer[0].state_dict())
            tb.encoder.layer[C + 1].load_state_dict(sb.encoder.layer[C - 1].state_dict())
    return copied


def layer_halves(family: Family, C: int, has_itl: bool) -> dict[str, str]:
    """Module prefix of each of the C source encoder layers (ITLs excluded) -> '@lower' or '@upper'. The lower
    half is the first C // 2 layers, so an odd count puts the middle layer in the upper half (004 Alg. 1's
    L <= N / L > N with N = C / 2)."""
    off = 1 if has_itl else 0
    return {f"{family.base}.encoder.layer.{i + off}.": "@lower" if i < C // 2 else "@upper" for i in range(C)}


def _tag_parameters(model, family: Family, copied: set[str], C: int, has_itl: bool) -> dict[str, set[str]]:
    itl_prefixes = (f"{family.base}.encoder.layer.0.", f"{family.base}.encoder.layer.{C + 1}.") if has_itl else ()
    halves = layer_halves(family, C, has_itl)
    tags = {}
    for name, _ in model.named_parameters():
        t = {"@all", "@source" if name in copied else "@new"}
        t |= {half for prefix, half in halves.items() if name.startswith(prefix)}  # adapters in a layer too
        if name.startswith(itl_prefixes):
            t.add("@itl")
        elif ".adapter." in name:
            t.add("@adapters")
        elif ".encoder.layer." in name:
            t.add("@encoder")
        if ".word_embeddings." in name:
            t.add("@embeddings")
        if ".position_embeddings." in name:
            t.add("@position")
        if name.startswith((family.head_dense, family.head_norm)):
            t.add("@lm_head")
        if name == family.head_bias:
            t.add("@lm_head_bias")
        tags[name] = t
    return tags

