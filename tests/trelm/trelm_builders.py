"""What the TreLM tests build, shared by the tests of the model, its data, its phases, its export, the sweep and the
GPU session: a tiny model with ``trelm`` attached, a built TreLM model, parallel shards, a training config over
them, the shipped three-phase config on the tiny model and a rank's unified stream."""
from __future__ import annotations

import dataclasses
import hashlib
import json

import numpy as np
import torch
import yaml
from torch import nn
from transformers import BertConfig, RobertaConfig

from conftest import REPO, SOURCE_VOCAB, TINY, base_config, write_config
from xpt_ds.config import DataConfig, ModelConfig, OptimConfig, TrainConfig
from xpt_ds.data.mlm import build_streams
from xpt_ds.data.tokenizer import build_tokenizer
from xpt_ds.model.build import build_model
from xpt_ds.model.values.stock_init import StockInit
from xpt_ds.model.skeleton import assign, skeleton
from xpt_ds.trelm.data import build_trelm_stream

SHIPPED = REPO / "launch/configs/trelm_three_phase.yaml"  # the three-phase TreLM config the repo ships


def trelm_skeleton(family: str = "bert", layers: int = 2, seed: int = 0) -> nn.Module:
    """A tiny stock model with ``trelm`` attached (xpt_ds.model.skeleton), random values everywhere (each
    parameter as the builder draws a new one), no dropout."""
    torch.manual_seed(seed)
    if family == "bert":
        cfg = BertConfig(**{**TINY, "num_hidden_layers": layers}, pad_token_id=0)
        cfg.xpt_position_offset = 0
    else:
        cfg = RobertaConfig(**{**TINY, "num_hidden_layers": layers}, pad_token_id=1, type_vocab_size=1)
        cfg.xpt_position_offset = 2  # pad + 1
    cfg.xpt_trelm_source_vocab_size, cfg.xpt_trelm_source_pad_id = SOURCE_VOCAB, 0
    init = StockInit(skeleton(cfg), seed)
    model = assign(skeleton(cfg), init.value).eval()
    with torch.no_grad():
        model.trelm.placeholder.normal_()
        model.trelm.language_embeddings.weight.normal_()
    return model


def build_trelm(source_dir, corpus_bert, **kw):
    cfg = ModelConfig(source=str(source_dir), tokenizer=str(corpus_bert / "spm.model"), method="trelm", **kw)
    return build_model(cfg, build_tokenizer(cfg.tokenizer))


def write_parallel(out, corpus_bert, pairs: int = 40, seed: int = 0):
    """Random pairs (source ids of the source tokenizer, target spm ids, t2s with some -1) as parallel shards,
    written by data_tools, with a parallel manifest."""
    from data_tools.pairs.parallel_shards import AlignedCorpus
    rng = np.random.default_rng(seed)
    src, tgt, s2t, t2s = [], [], [], []
    for _ in range(pairs):
        ns, nt = int(rng.integers(2, 40)), int(rng.integers(2, 40))
        src.append(rng.integers(5, SOURCE_VOCAB, ns))
        tgt.append(rng.integers(5, 200, nt))
        t2s.append(np.where(rng.random(nt) < 0.2, -1, rng.integers(0, ns, nt)))
        s2t.append(rng.integers(-1, nt, ns))
    corpus = AlignedCorpus(src, tgt, s2t, t2s, docs=[str(k // 4) for k in range(pairs)])
    return write_pairs(out, corpus_bert, corpus), corpus


def write_pairs(out, corpus_bert, corpus):
    """``corpus`` (a data_tools AlignedCorpus) as the train split of parallel shards with a parallel manifest."""
    from data_tools.pairs.parallel_shards import write_split
    dtypes = corpus.dtypes(SOURCE_VOCAB, 200)
    out.mkdir(parents=True, exist_ok=True)
    entry = write_split(out, "train", corpus, np.arange(len(corpus.src)), dtypes, shard_pairs=15)
    spm_file = corpus_bert / "spm.model"
    manifest = {"kind": "parallel", "format_version": 1,
                "source_tokenizer": {"name": "tiny", "class": "BertTokenizerFast", "vocab_size": SOURCE_VOCAB},
                "target_tokenizer": {"file": "spm.model", "vocab_size": 200,
                                     "sha256": hashlib.sha256(spm_file.read_bytes()).hexdigest()},
                "dtypes": {k: str(v) for k, v in dtypes.items()}, "splits": {"train": entry}}
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out / "manifest.json"


def trelm_train_config(tmp_path, source_dir, corpus_bert, parallel, **data):
    return TrainConfig(model=ModelConfig(source=str(source_dir), tokenizer=str(corpus_bert / "spm.model"),
                                         method="trelm"),
                       data=DataConfig(train_shards=[f"{corpus_bert}/manifest.json:train"], seq_len=32,
                                       num_workers=0, parallel_shards=[f"{parallel}:train"], **data))


def trelm_stream(cfg, rank=0, world=1, micro=2):
    """Rank ``rank``'s stream: ``micro`` MLM sequences and (data.parallel_micro_batch 0) ``micro`` pairs."""
    cfg = dataclasses.replace(cfg, optim=OptimConfig(micro_batch_size=micro))
    tok = build_tokenizer(cfg.model.tokenizer)
    mlm, _ = build_streams(cfg.data, tok, micro, rank, world)
    return build_trelm_stream(mlm, cfg, tok, SOURCE_VOCAB, rank, world)


def three_phase_config(run, source_dir, corpus_bert, english, parallel, last_trains=("@all",), every_steps=0):
    """The shipped config on the tiny model: 2 steps per phase (global steps 1-2 common, 3-4 en_x, 5-6 x_en,
    7-8 language_specific), fp32, torch AdamW."""
    cfg = yaml.safe_load(SHIPPED.read_text())
    for phase in cfg["phases"]:
        phase.update(steps=2, warmup_steps=1, lr=1e-3)
    cfg["phases"][3]["trainable"] = list(last_trains)
    small = base_config(run, source_dir, corpus_bert, checkpoint={"every_steps": every_steps})
    small["data"].update(source_shards=[f"{english}:train"], parallel_shards=[f"{parallel}:train"],
                         parallel_micro_batch=2, num_workers=0, valid_shards=[])
    cfg.update({k: small[k] for k in ("run_dir", "deepspeed", "data", "optim", "checkpoint", "logging")})
    cfg["model"].update(source=str(source_dir), tokenizer=str(corpus_bert / "spm.model"))
    return write_config(run.parent / f"{run.name}.yaml", cfg)
