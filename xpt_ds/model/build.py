"""Build the ITL-extended target model from an English *ForMaskedLM checkpoint (002 §3, eq. 7-10).

An XPT model is structurally a stock Bert/RobertaForMaskedLM with C+2 layers: layer 0 is ITL_in,
layers 1..C are the reused source encoder layers, layer C+1 is ITL_out. Export is therefore a plain
stock directory. Every parameter carries tags (``@new``, ``@source``, ``@embeddings``, ``@itl``,
``@lower``/``@upper`` (halves of the source layers), ...) that phase patterns select on.

One build for every start (``build_plan``): the target's config and tags come from the source's config.json and
the tokenizer; the module tree is a skeleton without storage (``xpt_ds.model.skeleton``); each parameter then
gets its value once, when it is filled, by its recipe (``xpt_ds.model.values.plan``): the source's tensor read from its
files, a draw from the parameter's own generator, or model.embedding_init's rows. A resume, a phase hand-over and
an export fill the same skeleton from a checkpoint or the previous engine instead (``xpt_ds.training``).
Decoder sources: ``xpt_ds.model.decoder``.
"""
from __future__ import annotations

import copy
import functools
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from transformers import AutoConfig, AutoModelForMaskedLM

from xpt_ds.config import ConfigError, DataConfig, ModelConfig
from xpt_ds.config.methods import METHODS
from xpt_ds.data.tokenizer import TargetTokenizer
from xpt_ds.embedding_init.context import InitContext, count_pieces, kept_vocabulary_report
from xpt_ds.embedding_init.registry import init_embeddings
from xpt_ds.io.model_source import check_model_source
from xpt_ds.io.trust import reading_weights
from xpt_ds.metrics.run_log import quiet_load_report
from xpt_ds.model.methods import extend, lora
from xpt_ds.model.decoder import (
    DECODER_FAMILIES,
    attention_kernel,
    check_decoder_method,
    decoder_rules,
    drop_source_code,
    is_decoder,
    source_location,
)
from xpt_ds.model.decoder import tag_parameters as decoder_tag_parameters
from xpt_ds.model.decoder import target_config as decoder_target_config
from xpt_ds.model.methods.extensions import extension_of
from xpt_ds.model.values.stock_init import StockInit, param_seed
from xpt_ds.model.values.plan import CopyRule, PlanValues, Recipe, recipes_for
from xpt_ds.model.skeleton import assign, no_init_weights, parameters_on_meta, skeleton
from xpt_ds.model.values.source_files import RandomSource, SourceFiles, StateSource, local_snapshot
from xpt_ds.model.values.source_weights import check_not_quantized, checked_missing

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
    model: nn.Module  # a stock *ForMaskedLM (plus adapters for method=adapters, TreLM's parts), or *ForCausalLM
    family: Family | object  # a decoder source's: xpt_ds.model.decoder.DecoderFamily
    tags: dict[str, set[str]]  # parameter name -> tags
    embedding_init: dict | None  # the embedding_init report (xpt_ds.embedding_init.registry.Rows.report)


@dataclass
class BuildPlan:
    """The target of a run before any weight is read: its HF config, family and tags, each parameter's recipe,
    the embedding_init report, and ``values``, which gives each parameter's float32 value when asked
    (``xpt_ds.model.values.plan.PlanValues``). ``close`` drops what ``values`` holds (the source's open files, the new
    rows)."""
    tcfg: object
    family: Family | object
    tags: dict[str, set[str]]
    recipes: dict[str, Recipe]
    embedding_init: dict | None
    values: PlanValues

    def close(self) -> None:
        self.values.close()


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
    # a directory, a hub id the cache or the hub has, or a .gguf file; else one line, before transformers asks
    # the hub (and retries for 23 s where it cannot reach it)
    check_model_source(src, "config key 'model.source'", ConfigError, gguf=True)
    try:
        config = AutoConfig.from_pretrained(location, trust_remote_code=False, **gguf)
    except ImportError as e:  # transformers reads GGUF through the gguf package
        raise ConfigError(f"config key 'model.source': reading {src} needs the gguf package "
                          f"(pip install gguf): {str(e).strip().splitlines()[0]}") from None
    except (OSError, ValueError) as e:
        if Path(location).is_dir() and not gguf and not (Path(location) / "config.json").is_file():
            raise ConfigError(f"config key 'model.source': {src} has no config.json (a model directory holds it "
                              "beside the weights, as save_pretrained writes them)") from None
        where = "local directory" if Path(location).is_dir() else "hub id"
        raise ConfigError(f"config key 'model.source': cannot load '{src}' ({where}): "
                          f"{str(e).strip().splitlines()[0]}") from None
    if not gguf:  # transformers dequantizes a GGUF file itself (``open_source``)
        check_not_quantized(src, config)
    return config


def planned_tags(cfg: ModelConfig, family, tcfg) -> dict[str, set[str]]:
    """The parameters ``planned_target``'s config builds, on the meta device (no memory, no weights), each with
    the tags it may carry: which weights come from the source depends on what its files hold, so every one
    carries both @source and @new. A phase pattern that matches nothing here matches nothing in the built model
    (``phases.check_patterns``: the check before the load)."""
    model = skeleton(tcfg)
    method = METHODS[cfg.method]
    layers = tcfg.num_hidden_layers - (2 if method.has_itl else 0)
    tag = decoder_tag_parameters if is_decoder(tcfg) else _tag_parameters
    tags = {n: t | {"@source"} for n, t in tag(model, family, set(), layers, method.has_itl).items()}
    extension = extension_of(method)
    return {n: t | extension.tags(n) for n, t in tags.items()} if extension is not None else tags


def _check_encoder_source(cfg: ModelConfig, src_cfg) -> None:
    if METHODS[cfg.method].vocab == "extend":
        raise ConfigError(f"config key 'model.method': extend is for decoder sources "
                          f"({', '.join(sorted(DECODER_FAMILIES))}); {cfg.source} is a {src_cfg.model_type} masked "
                          "LM (its vocabulary methods are xpt and keep_vocab)")
    if METHODS[cfg.method].lora:
        raise ConfigError(f"config key 'model.method': lora is for decoder sources "
                          f"({', '.join(sorted(DECODER_FAMILIES))}); {cfg.source} is a {src_cfg.model_type} masked "
                          "LM (its parameter-efficient baseline is method adapters)")
    if not getattr(src_cfg, "tie_word_embeddings", True) and (METHODS[cfg.method].vocab == "source"
                                                               or METHODS[cfg.method].trelm):
        what = ("predicts English through a decoder tied to the source's word rows" if METHODS[cfg.method].trelm
                else "keeps the source's word rows in a target whose LM head is tied to them")
        raise ConfigError(f"config key 'model.method': {cfg.method} {what}, but {cfg.source}'s config.json unties "
                          "its head (tie_word_embeddings: false): its own head matrix would be lost")
    if src_cfg.model_type not in FAMILIES:
        raise ConfigError(f"config key 'model.source': model_type '{src_cfg.model_type}' is not supported "
                          f"(valid: {', '.join(sorted(FAMILIES))} (masked LMs); "
                          f"{', '.join(sorted(DECODER_FAMILIES))} (causal LMs))")


def source_skeleton(src_cfg) -> nn.Module:
    """The source model's module tree on the meta device (its parameter names and shapes, no values)."""
    from transformers import AutoModelForCausalLM
    auto = AutoModelForCausalLM if is_decoder(src_cfg) else AutoModelForMaskedLM
    # the target skeleton's attention, not one the config.json names (flash_attention_2 needs flash-attn)
    kernel = attention_kernel(src_cfg) if is_decoder(src_cfg) else "sdpa"
    with no_init_weights(), parameters_on_meta():
        model = auto.from_config(copy.deepcopy(src_cfg), attn_implementation=kernel, dtype=torch.float32)
    model.tie_weights()
    return model


def open_source(cfg: ModelConfig, src_cfg, meta_source: nn.Module):
    """The source's weights, read a tensor at a time (``xpt_ds.model.values.source_files``); random ones for a method
    whose source is 'random'. A weight the source lacks (the MLM head of an encoder-only checkpoint) is drawn as
    the stock class draws it, from ``init_seed + 1`` and its name, and counts as @new; a source lacking others,
    or holding weights the stock class does not use while naming code of its own, is one error line
    (``xpt_ds.model.values.source_weights``)."""
    what = f"config key 'model.source': {cfg.source}"
    decoder = is_decoder(src_cfg)
    if decoder:
        check_decoder_method(cfg.method, src_cfg.model_type)
    else:
        _check_encoder_source(cfg, src_cfg)
    if METHODS[cfg.method].source == "random":
        return RandomSource(meta_source, cfg.init_seed + 1)
    location, gguf = source_location(cfg.source)
    if gguf:  # transformers dequantizes a GGUF file whole (to fp32); GGUF sources are small quantized models
        from transformers import AutoModelForCausalLM
        # quiet_load_report: the weights it lacks are this function's warning below, not transformers' table
        with reading_weights(what, ConfigError), torch.random.fork_rng(devices=[]), quiet_load_report():
            torch.manual_seed(cfg.init_seed + 1)
            model, info = AutoModelForCausalLM.from_pretrained(location, output_loading_info=True,
                                                               trust_remote_code=False, **gguf)
        source = StateSource(dict(model.named_parameters()), set(info["missing_keys"]),
                             set(info["unexpected_keys"]))
    else:
        try:
            source = SourceFiles(cfg.source, local_snapshot(location, what), meta_source, what)
        except FileNotFoundError as e:
            raise ConfigError(f"{what}: {e}") from None
    head = ("lm_head.",) if decoder else (FAMILIES[src_cfg.model_type].head_dense.split(".")[0] + ".",)
    missing = checked_missing(cfg.source, src_cfg, type(meta_source).__name__, source.missing, source.unexpected,
                              head)
    if missing:
        log.warning("source %s lacks %d %sweights (%s...); they start fresh and count as @new", cfg.source,
                    len(missing), "" if decoder else "MLM ", sorted(missing)[0])
    source.fresh = StockInit(meta_source, cfg.init_seed + 1)
    return source


def load_source_model(cfg: ModelConfig) -> tuple[nn.Module, set[str]]:
    """(the English model in float32, the names of the weights its checkpoint lacks), built as the run builds
    the source: its missing weights drawn from ``init_seed + 1`` (the probe scores the source itself)."""
    src_cfg = source_config(cfg)
    meta = source_skeleton(src_cfg)
    source = open_source(cfg, src_cfg, meta)
    try:
        return assign(meta, source.get), set(source.missing)
    finally:
        source.close()


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
    # Longest input that stays on position rows the source trained: RoBERTa puts token i (from 1) on row pad + i,
    # the target's pad, which takes the source's row src_pad + i (``_position_shift``); both rows must exist.
    offset = max(src_cfg.pad_token_id, tok.pad_id) + 1 if FAMILIES[src_cfg.model_type].offset_positions else 0
    tcfg.xpt_max_length = src_cfg.max_position_embeddings - offset
    if cfg.dropout >= 0:
        tcfg.hidden_dropout_prob = tcfg.attention_probs_dropout_prob = cfg.dropout
    if METHODS[cfg.method].adapters:
        tcfg.xpt_adapter_size = cfg.adapter_size
    if METHODS[cfg.method].trelm:  # the English vocabulary beside the target's (xpt_ds.trelm.model)
        tcfg.xpt_trelm_source_vocab_size, tcfg.xpt_trelm_source_pad_id = src_cfg.vocab_size, src_cfg.pad_token_id
        tcfg.xpt_position_offset = tok.pad_id + 1 if FAMILIES[src_cfg.model_type].offset_positions else 0
    return tcfg


def _encoder_rules(cfg: ModelConfig, family: Family, src_cfg, tcfg) -> list[CopyRule]:
    """Which target parameters come from which source prefix (002 §3: the source encoder one layer down, its
    embeddings' token types and norm, its head's transform; 003 keep_vocab: also its word rows and head bias;
    TreLM: the TRILayer from the layer it follows and the English vocabulary)."""
    method = METHODS[cfg.method]
    if method.source == "none":
        return []
    fb, C = family.base, src_cfg.num_hidden_layers
    off = 1 if method.has_itl else 0
    rules = [CopyRule(f"{fb}.encoder.layer.{i + off}.", f"{fb}.encoder.layer.{i}.") for i in range(C)]
    rules += [CopyRule(p, p) for p in (f"{fb}.embeddings.token_type_embeddings.", f"{fb}.embeddings.LayerNorm.",
                                       f"{fb}.embeddings.position_embeddings.", family.head_dense + ".",
                                       family.head_norm + ".")]
    if method.vocab == "source":  # 003 [lang->en][lang]: the source's word rows and head bias, all of them
        rules += [CopyRule(f"{fb}.embeddings.word_embeddings.", f"{fb}.embeddings.word_embeddings."),
                  CopyRule(family.head_bias, family.head_bias)]
    if off and cfg.itl_init == "copy":  # ITL_in as the first source layer, ITL_out as the last; still new
        rules += [CopyRule(f"{fb}.encoder.layer.0.", f"{fb}.encoder.layer.0.", tagged=False),
                  CopyRule(f"{fb}.encoder.layer.{C + 1}.", f"{fb}.encoder.layer.{C - 1}.", tagged=False)]
    if method.trelm:  # 004 §3.2: the TRILayer as the layer it follows (new), the English vocabulary (the source's)
        half = (C + 2 * off) // 2
        rules += [CopyRule("trelm.trilayer.", f"{fb}.encoder.layer.{half - 1 - off}.", tagged=False),
                  CopyRule("trelm.source_word_embeddings.", f"{fb}.embeddings.word_embeddings."),
                  CopyRule("trelm.source_lm_bias", family.head_bias)]
    return rules


def _position_shift(cfg: ModelConfig, family: Family, src_cfg, tok: TargetTokenizer) -> dict[str, int]:
    """RoBERTa puts token i on row pad+1+i, so a target pad id other than the source's shifts every row: the
    target's row for position i takes the source's row for position i (the rows beyond are drawn)."""
    shift = tok.pad_id - src_cfg.pad_token_id if family.offset_positions else 0
    return {f"{family.base}.embeddings.position_embeddings.weight": shift} if shift else {}


def _embedding_rows(cfg: ModelConfig, tok: TargetTokenizer, data: DataConfig | None, source, src_matrix: str,
                    target_name: str, std: float, kept_rows: int = 0) -> tuple[torch.Tensor, dict]:
    """model.embedding_init's rows for target parameter ``target_name`` over the source matrix ``src_matrix``,
    the strategy's generator seeded from init_seed and the parameter's name (as every new parameter's is);
    ``kept_rows``: method extend's old rows, which the report leaves out."""
    ctx = InitContext(tok, source.get(src_matrix), cfg.source,
                      torch.Generator().manual_seed(param_seed(cfg.init_seed, target_name)), std, {}, data)
    return init_embeddings(cfg.embedding_init, cfg.embedding_init_args, ctx, kept_rows)


def _source_matrices(meta_source: nn.Module) -> dict[str, str]:
    """Target stock name -> the source's parameter name, for the input embedding and the head (a tied head's
    name is the embedding's)."""
    emb = _parameter_name(meta_source, meta_source.get_input_embeddings().weight)
    return {emb: emb, "lm_head.weight": _parameter_name(meta_source, meta_source.get_output_embeddings().weight)}


def _parameter_name(model: nn.Module, param: nn.Parameter) -> str:
    return next(n for n, p in model.named_parameters() if p is param)


def build_plan(cfg: ModelConfig, tok: TargetTokenizer, data: DataConfig | None = None,
               rows: bool = True) -> BuildPlan:
    """The target of ``cfg`` and where each of its values comes from (``BuildPlan``), having read of the source's
    weights only the rows model.embedding_init works from (its input matrix, and an untied head's). ``data``
    gives the training shards to the strategies that count pieces (frequency_rank). ``rows=False``: the tags
    only (an old checkpoint's resume); the strategy does not run and the plan's rows have no values."""
    method = METHODS[cfg.method]
    src_cfg = source_config(cfg)
    family, tcfg = planned_target(cfg, tok)
    meta = skeleton(tcfg)
    meta_source = source_skeleton(src_cfg)
    source = open_source(cfg, src_cfg, meta_source)
    names = [n for n, _ in meta.named_parameters()]
    source_names = {n for n, _ in meta_source.named_parameters()}
    decoder = is_decoder(src_cfg)
    row_params: dict[str, str] = {}
    old_rows = extend.extended_rows(tcfg)
    if method.vocab in ("target", "extend"):  # extend: the new rows' parameters only
        part = "new_rows" if old_rows else "weight"
        row_params[_parameter_name(meta, getattr(meta.get_input_embeddings(), part))] = "input"
        if decoder and not tcfg.tie_word_embeddings:
            row_params[_parameter_name(meta, getattr(meta.get_output_embeddings(), part))] = "output"
    if decoder:
        recipes, copied = recipes_for(names, decoder_rules(cfg, family, src_cfg), source_names, row_params,
                                      rename=lora.base_name)
        if old_rows:  # the source's rows for the pieces it had, as they are
            src_matrices = _source_matrices(meta_source)
            for stock, (old_name, _) in extend.stock_names(meta).items():
                recipes[old_name] = Recipe("source", src_matrices[stock], rows=old_rows)
                copied.add(old_name)
    else:
        recipes, copied = recipes_for(names, _encoder_rules(cfg, family, src_cfg, tcfg), source_names, row_params,
                                      _position_shift(cfg, family, src_cfg, tok))
    copied = {n for n in copied if recipes[n].key not in source.missing}
    if decoder:  # tagged by the stock name under LoRA's base_layer
        tags = decoder_tag_parameters(meta, family, {lora.base_name(n) for n in copied}, src_cfg.num_hidden_layers,
                                      method.has_itl)
    else:
        tags = _tag_parameters(meta, family, copied, src_cfg.num_hidden_layers, method.has_itl)
        if (extension := extension_of(method)) is not None:
            tags = {name: t | extension.tags(name) for name, t in tags.items()}
    matrices, report = {}, None
    if method.vocab == "source":
        report = kept_vocabulary_report(tok.vocab_size)
    elif rows:
        std = src_cfg.initializer_range
        by_kind = {kind: name for name, kind in row_params.items()}
        matrices["input"], report = _embedding_rows(cfg, tok, data, source, _parameter_name(
            meta_source, meta_source.get_input_embeddings().weight), by_kind["input"], std, old_rows)
        if "output" in by_kind:
            matrices["output"], out_report = _embedding_rows(cfg, tok, data, source, _parameter_name(
                meta_source, meta_source.get_output_embeddings().weight), by_kind["output"], std, old_rows)
            report = {**report, "output_rows": out_report}
        if old_rows:  # the strategy ran over the whole extended vocabulary; the old rows are the source's
            matrices = {kind: m[old_rows:].contiguous() for kind, m in matrices.items()}
    if cfg.head_bias_init == "unigram":
        report = _unigram_head_bias(cfg, family, decoder, recipes, matrices, report, tok, data, rows)
    values = PlanValues(recipes, source, StockInit(meta, cfg.init_seed), matrices)
    return BuildPlan(tcfg, family, tags, recipes, report, values)


def _unigram_head_bias(cfg: ModelConfig, family: Family, decoder: bool, recipes: dict[str, Recipe],
                       matrices: dict, report: dict, tok: TargetTokenizer, data: DataConfig | None, rows: bool) -> dict:
    """model.head_bias_init 'unigram': the head's bias is log((count + 1) / (N + V)) over data.train_shards, the
    logits of ``xpt_ds.cli.evaluate --unigram``'s predictor, so the model starts from piece frequencies. Adam moves a
    bias by about lr a step, so from zero, learning the ~5 nats between frequent and rare pieces takes hundreds of
    steps that a small corpus cannot spare. Returns the embedding report with a line on it."""
    if decoder or family.head_bias not in recipes:
        raise ConfigError(f"config key 'model.head_bias_init' is 'unigram', but the source {cfg.source!r} has no "
                          "LM-head bias (decoders' heads have none); use zero (the default)")
    recipes[family.head_bias] = Recipe("rows", "head_bias")
    if not rows:
        return report
    if data is None or not data.train_shards:
        raise ConfigError("config key 'model.head_bias_init' is 'unigram', which counts pieces in "
                          "data.train_shards, and that is empty")
    counts = count_pieces(list(data.train_shards), tok, data.on_corrupt_shard, data)[0].astype(np.float64)
    matrices["head_bias"] = torch.from_numpy(np.log((counts + 1.0) / (counts.sum() + len(counts)))).float()
    return {**report, "head_bias": f"unigram: log add-one frequency of {int(counts.sum())} train pieces"}


def build_model(cfg: ModelConfig, tok: TargetTokenizer, data: DataConfig | None = None) -> BuiltModel:
    """The target model of ``cfg`` in float32, in this process (evaluation, tests, benchmarks): ``build_plan``'s
    values assigned to a meta skeleton, each computed once. The trainer builds the same values into its engine
    (``xpt_ds.training.fill``)."""
    plan = build_plan(cfg, tok, data)
    try:
        model = assign(skeleton(plan.tcfg), plan.values)
    finally:
        plan.close()
    return BuiltModel(model=model, family=plan.family, tags=plan.tags, embedding_init=plan.embedding_init)


def _check_kept_vocabulary(cfg: ModelConfig) -> None:
    if METHODS[cfg.method].vocab == "source" and (cfg.embedding_init != "random" or cfg.embedding_init_args):
        raise ConfigError(f"config key 'model.embedding_init': method {cfg.method} keeps the source's word "
                          "embeddings; leave embedding_init at its default")


def planned_target(cfg: ModelConfig, tok: TargetTokenizer):
    """(family, the target model's HF config) from ``model.source``'s config.json and the tokenizer alone, no
    weights: what every start builds (``build_plan``; a resume, from a checkpoint's tags). The trainer checks the
    data against it before it reads gigabytes of source weights (a shard path's typo is an error in seconds, not
    after the load)."""
    src_cfg = source_config(cfg)
    if is_decoder(src_cfg):
        check_decoder_method(cfg.method, src_cfg.model_type)
        _check_kept_vocabulary(cfg)
        return DECODER_FAMILIES[src_cfg.model_type], decoder_target_config(src_cfg, cfg, tok)
    _check_encoder_source(cfg, src_cfg)
    _check_kept_vocabulary(cfg)
    return FAMILIES[src_cfg.model_type], _target_config(src_cfg, cfg, tok)


def saved_tags(tags: dict[str, set[str]]) -> dict[str, list[str]]:
    """The tags as a checkpoint's client state keeps them (plain lists, read back without unpickling code)."""
    return {name: sorted(t) for name, t in tags.items()}


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

