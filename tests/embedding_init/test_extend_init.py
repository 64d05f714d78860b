"""embedding_init under method extend (the target is the source's byte-level tokenizer plus one merge, Ġп + ри,
in the directory ``xpt-data extend-vocab`` writes): the strategies that read files take data_tools' ``hf``
identity of that directory, overlap reads the target's byte-level pieces, and the report counts the new rows."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from test_subword_mean import HASHES, _alpha, byte_level
from xpt_ds.config import ConfigError, ModelConfig
from xpt_ds.data.tokenizer import tokenizer_for
from xpt_ds.embedding_init.context import InitContext, summary
from xpt_ds.embedding_init.registry import init_embeddings
from xpt_ds.embedding_init.strategies import overlap

HIDDEN = 16


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    """(source model directory: a tiny untied Llama over the byte-level tokenizer, extended tokenizer directory)."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
    root = tmp_path_factory.mktemp("extend")
    source = byte_level(root / "source", extra=HASHES)
    stok = AutoTokenizer.from_pretrained(source)
    torch.manual_seed(2)
    LlamaForCausalLM(LlamaConfig(hidden_size=HIDDEN, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                 intermediate_size=32, vocab_size=len(stok), bos_token_id=stok.bos_token_id,
                                 eos_token_id=stok.eos_token_id, pad_token_id=stok.pad_token_id,
                                 tie_word_embeddings=False)).save_pretrained(source)
    ext = byte_level(root / "ext", extra=HASHES + [(_alpha(" п"), _alpha("ри"))])
    (ext / "extend_vocab.json").write_text(json.dumps({"source_size": len(stok)}))
    return source, ext


def _tok(dirs, **model):
    source, ext = dirs
    cfg = ModelConfig(source=str(source), tokenizer=str(ext), method="extend", **model)
    return cfg, tokenizer_for(cfg, causal=True)


def _ctx(dirs) -> InitContext:
    from transformers import AutoModelForCausalLM
    emb = AutoModelForCausalLM.from_pretrained(dirs[0]).get_input_embeddings().weight.detach().clone()
    return InitContext(_tok(dirs)[1], emb, str(dirs[0]), torch.Generator().manual_seed(5), 0.02, {})


def _write(prefix, matrix, tokenizer_dir, **meta):
    from data_tools.embeddings.embedding_files import write_embeddings
    from data_tools.piece_tokenizers import HfTokenizer
    return write_embeddings(prefix, matrix, {"kind": meta.pop("kind", "static"),
                                             "tokenizer": HfTokenizer(tokenizer_dir).identity(), **meta})


def test_overlap_reads_the_byte_level_target(dirs):
    """Every old piece of the extended byte-level target is spelled like the source token of the same id (Ġп is
    the word-initial п on both sides; Ġ alone has no text, specials never overlap); the new Ġпри is no source
    token."""
    ctx = _ctx(dirs)
    shared = overlap(ctx)
    special = set(ctx.tok.special_ids) | set(ctx.source_tokenizer.all_special_ids)
    old = [i for i in range(ctx.tok.vocab_size - 1) if i not in special and ctx.tok.piece(i) != "Ġ"]
    assert {i: sid for i, (sid, _) in shared.items()} == {i: i for i in old}


def test_from_file_focus_aligned_take_the_hf_identity(dirs, tmp_path):
    """Files over the extended tokenizer's ids carry data_tools' ``hf`` identity of its directory: from_file copies
    them, focus combines the new piece from its static neighbour, aligned from its mapped one; a file over a
    SentencePiece model is one line."""
    ctx = _ctx(dirs)
    V, Vs, new = ctx.tok.vocab_size, ctx.source_embeddings.shape[0], ctx.tok.vocab_size - 1
    rows = np.random.default_rng(0).normal(size=(V, HIDDEN)).astype(np.float32)
    path = _write(tmp_path / "rows", rows, dirs[1], kind="input-embeddings")
    matrix, report = init_embeddings("from_file", {"path": str(path)}, _ctx(dirs))
    assert torch.equal(matrix[new], torch.from_numpy(rows[new])) and report["copied"] == V - 1
    a = ctx.tok.vocab_size - 2  # an old piece: its static vector is the new piece's one
    static = np.eye(V, dtype=np.float32)
    static[new] = static[a]
    path = _write(tmp_path / "static", static, dirs[1], method="fasttext")
    matrix, report = init_embeddings("focus", {"static": str(path)}, _ctx(dirs))
    assert torch.equal(matrix[new], ctx.source_embeddings[a])
    assert [e["source"] for e in report["examples"]["combined"] if e["id"] == new] == [[[ctx.tok.piece(a), 1.0]]]
    src_static = np.eye(Vs, dtype=np.float32)
    tgt = np.zeros((V, Vs), np.float32)
    tgt[new] = src_static[a]
    src_path = _write(tmp_path / "src", src_static, dirs[0])
    from data_tools.piece_tokenizers import HfTokenizer
    tgt_path = _write(tmp_path / "tgt", tgt, dirs[1], kind="procrustes", unseen_ids=list(range(new)),
                      source_tokenizer=HfTokenizer(dirs[0]).identity())
    matrix, report = init_embeddings("aligned", {"target": str(tgt_path), "source": str(src_path), "top_k": 1},
                                     _ctx(dirs))
    assert torch.equal(matrix[new], ctx.source_embeddings[a]) and report["combined"] == 1
    spm_file = _write(tmp_path / "spm", rows, dirs[1], kind="input-embeddings")
    meta = json.loads(spm_file.read_text())
    meta["tokenizer"]["kind"] = "sentencepiece"
    spm_file.write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match="'sentencepiece' tokenizer, expected hf") as e:
        init_embeddings("from_file", {"path": str(spm_file)}, _ctx(dirs))
    assert "\n" not in str(e.value)


def test_build_reports_the_new_rows(dirs):
    """build_model under extend: the old rows are the source's and the report (input and head) counts the one new
    row, Ġпри = mean(Ġп, ри), and says how many source rows were kept, not 279 rows the strategy did not make."""
    from transformers import AutoModelForCausalLM

    from xpt_ds.model.build import build_model
    cfg, tok = _tok(dirs, embedding_init="subword_mean")
    built = build_model(cfg, tok)
    old = tok.vocab_size - 1
    source = AutoModelForCausalLM.from_pretrained(dirs[0])
    assert torch.equal(built.model.get_input_embeddings().old_rows, source.get_input_embeddings().weight)
    report = built.embedding_init
    for r in (report, report["output_rows"]):
        assert (r["rows"], r["combined"], r["kept_source_rows"], r.get("copied"), r.get("zero")) == (1, 1, old, 0, 0)
        assert r["examples"] == {"combined": [{"id": old, "piece": _alpha(" при"),
                                               "source": [_alpha(" п"), _alpha("ри")]}]}
    assert f"1 combined of 1 new rows ({old} source rows kept)" in summary(report)
