"""embedding_init strategies: rows copied bit-exactly at the right ids for BERT (WordPiece) and RoBERTa (byte-level
BPE) sources, frequency ranks, specials, fallback statistics, FOCUS/WECHSEL on toy cases with known answers,
file checks, config errors, and two ranks through the real launcher agreeing on the matrix."""
from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForMaskedLM

from conftest import base_config, launch, write_config
from xpt_ds.config import ConfigError, DataConfig, ModelConfig, load_config
from xpt_ds.data.tokenizer import build_tokenizer
from xpt_ds.embedding_init.context import InitContext
from xpt_ds.embedding_init.registry import init_embeddings
from xpt_ds.model.build import build_model

WORDS = ("the of and to in is was for on that with as it his by at from he her they this we be are have had not "
         "but what all were when there can an your which their said if do will each about how up out them then "
         "she many some so these would other into has more two like him time see no could make than first been "
         "its who now people my made over did down only way find use may water long little very after words "
         "called just where most know playing walked").split()
SOURCE_WORDS = WORDS[:45] + ["wat", "peop"]  # the rest is new to the source
SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
             max_position_embeddings=80)


def _english(path: Path, seed: int = 0, lines: int = 600) -> Path:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, len(WORDS) + 1)
    p /= p.sum()
    text = []
    for i in range(lines):
        text.append(" ".join(rng.choice(WORDS, rng.integers(4, 14), p=p)) + ".")
        if i % 6 == 5:
            text.append("")
    path.write_text("\n".join(text), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def english(tmp_path_factory) -> Path:
    return _english(tmp_path_factory.mktemp("en") / "en.txt")


def _target(out: Path, text: Path, family: str) -> Path:
    from data_tools.pipeline.run import prepare
    return prepare([text], out, vocab_size=120, family=family, valid=0.1, test=0.05, seed=0).parent


@pytest.fixture(scope="module")
def target_bert(tmp_path_factory, english) -> Path:
    return _target(tmp_path_factory.mktemp("target_bert"), english, "bert")


@pytest.fixture(scope="module")
def target_roberta(tmp_path_factory, english) -> Path:
    return _target(tmp_path_factory.mktemp("target_roberta"), english, "roberta")


@pytest.fixture(scope="module")
def bert_source(tmp_path_factory) -> Path:
    """A BERT-style source: [PAD] [unused0..1] [UNK] [CLS] [SEP] [MASK], single characters, ##characters, words."""
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast
    out = tmp_path_factory.mktemp("bert_source")
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["."]
    vocab = (["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + letters
             + [f"##{c}" for c in letters] + SOURCE_WORDS + ["##s", "##ing", "##ed", "##er", "##ple"])
    (out / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizerFast(vocab=str(out / "vocab.txt")).save_pretrained(out)  # transformers 5: vocab=, not vocab_file=
    torch.manual_seed(3)
    BertForMaskedLM(BertConfig(vocab_size=len(vocab), pad_token_id=0, **SMALL)).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def roberta_source(tmp_path_factory, english) -> Path:
    """A RoBERTa-style source: byte-level BPE trained on other English text (256 single bytes, then merges)."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaConfig, RobertaForMaskedLM, RobertaTokenizerFast
    out = tmp_path_factory.mktemp("roberta_source")
    bpe = ByteLevelBPETokenizer()
    lines = _english(out / "text.txt", seed=5, lines=300).read_text().splitlines()
    bpe.train_from_iterator([" ".join(w for w in line.split() if w in SOURCE_WORDS) for line in lines],
                            vocab_size=330, min_frequency=2, show_progress=False,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    bpe.save_model(str(out))
    tok = RobertaTokenizerFast(vocab=str(out / "vocab.json"), merges=str(out / "merges.txt"))
    tok.save_pretrained(out)
    (out / "text.txt").unlink()
    torch.manual_seed(4)
    RobertaForMaskedLM(RobertaConfig(vocab_size=len(tok), pad_token_id=1, bos_token_id=0, eos_token_id=2,
                                     type_vocab_size=1, **SMALL)).save_pretrained(out)
    return out


@pytest.fixture(params=["bert", "roberta"])
def pair(request, bert_source, roberta_source, target_bert, target_roberta):
    return (bert_source, target_bert) if request.param == "bert" else (roberta_source, target_roberta)


def _ctx(source: Path, corpus: Path, seed: int = 1234) -> InitContext:
    tok = build_tokenizer(str(corpus / "spm.model"))
    emb = AutoModelForMaskedLM.from_pretrained(source).get_input_embeddings().weight.detach().float().clone()
    return InitContext(tok, emb, str(source), torch.Generator().manual_seed(seed), 0.02, {},
                       DataConfig(train_shards=[f"{corpus}/manifest.json:train"]))


def _source_tok(source: Path):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(source)


def _expected_overlap(ctx: InitContext) -> dict[int, int]:
    """Target id -> source id, spelled out per vocabulary style (ASCII text: byte-level BPE is plain text + Ġ)."""
    stok = _source_tok(Path(ctx.source))
    vocab, bert = stok.get_vocab(), "##s" in stok.get_vocab()
    special = set(ctx.tok.special_ids)
    out = {}
    for i in range(ctx.tok.vocab_size):
        piece = ctx.tok.piece(i)
        if i in special or piece == "▁":
            continue
        if piece.startswith("▁"):
            key = piece[1:] if bert else "Ġ" + piece[1:]
        elif bert and not piece.isalnum():  # BERT's pre-tokenizer cuts a mark off as a word: `.`, never `##.`
            key = piece if len(piece) == 1 else ""
        else:
            key = "##" + piece if bert else piece
        if key in vocab:
            out[i] = vocab[key]
    return out


def _specials(ctx: InitContext) -> dict[int, int]:
    stok = _source_tok(Path(ctx.source))
    t = ctx.tok
    return {t.cls_id: stok.cls_token_id, t.sep_id: stok.sep_token_id, t.unk_id: stok.unk_token_id,
            t.mask_id: stok.mask_token_id}


def _rows_equal_to_some_source_row(matrix: torch.Tensor, source: torch.Tensor, pad: int) -> int:
    """Non-pad rows equal to some source row (the pad row is zero, as a source's pad row may be too)."""
    return int(sum(bool((source == row).all(1).any()) for i, row in enumerate(matrix) if i != pad))


def test_overlap_copy_copies_source_rows_bitwise(pair):
    source, corpus = pair
    ctx = _ctx(source, corpus)
    matrix, report = init_embeddings("overlap_copy", {}, ctx)
    expected = _expected_overlap(ctx)
    assert len(expected) >= 20, expected  # the toy vocabularies share many words
    for i, sid in expected.items():
        assert torch.equal(matrix[i], ctx.source_embeddings[sid]), ctx.tok.piece(i)
    for i, sid in _specials(ctx).items():
        assert torch.equal(matrix[i], ctx.source_embeddings[sid])
    assert not matrix[ctx.tok.pad_id].any()
    assert report["copied"] == len(expected) and report["special"] == 4 and report["zero"] == 1
    assert report["fallback"] == ctx.tok.vocab_size - len(expected) - 5
    # recount from the matrix: exactly the copied and special rows equal some source row
    assert _rows_equal_to_some_source_row(matrix, ctx.source_embeddings, ctx.tok.pad_id) == report["copied"] + report["special"]
    eg = report["examples"]["copied"][0]
    assert _source_tok(source).convert_tokens_to_ids(eg["source"][0]) == expected[eg["id"]]


def _count_train_ids(corpus: Path, vocab: int) -> np.ndarray:
    manifest = json.loads((corpus / "manifest.json").read_text())
    counts = np.zeros(vocab, np.int64)
    for shard in manifest["splits"]["train"]["shards"]:
        with tarfile.open(corpus / shard) as tar:
            for m in tar:
                if m.name.endswith(".ids.npy"):
                    ids = np.load(io.BytesIO(tar.extractfile(m).read()))
                    counts += np.bincount(ids.astype(np.int64), minlength=vocab)
    return counts


def test_frequency_rank_maps_top_piece_to_source_rank_zero(pair):
    source, corpus = pair
    ctx = _ctx(source, corpus)
    matrix, report = init_embeddings("frequency_rank", {}, ctx)
    counts = _count_train_ids(corpus, ctx.tok.vocab_size)
    assert np.array_equal(ctx.counts, counts)
    counts[ctx.tok.special_ids] = -1
    top, second = np.argsort(-counts, kind="stable")[:2]
    stok = _source_tok(source)
    vocab = stok.get_vocab()
    # rank 0 / 1 after leaving out specials, [unused], and one-character tokens: the first two source words
    # (byte-level BPE: the 256 single bytes, then merges such as 'th', 'the', 'Ġthe'; 'Ġo' is one character)
    rank0, rank1 = (vocab["the"], vocab["of"]) if "##s" in vocab else sorted(
        i for t, i in vocab.items() if len(t.removeprefix("Ġ")) > 1 and i not in stok.all_special_ids)[:2]
    if "##s" not in vocab:
        assert stok.convert_ids_to_tokens([rank0, rank1]) == ["th", "the"]
    assert torch.equal(matrix[top], ctx.source_embeddings[rank0]), (ctx.tok.piece(int(top)), rank0)
    assert torch.equal(matrix[second], ctx.source_embeddings[rank1])
    for i, sid in _specials(ctx).items():
        assert torch.equal(matrix[i], ctx.source_embeddings[sid])
    assert not matrix[ctx.tok.pad_id].any() and report["special"] == 4
    assert _rows_equal_to_some_source_row(matrix, ctx.source_embeddings, ctx.tok.pad_id) == report["copied"] + report["special"]
    assert report["copied"] + report["fallback"] + 5 == ctx.tok.vocab_size


@pytest.mark.parametrize("max_dim", [2048, 8])  # full covariance, and the diagonal one
def test_source_mean_rows_have_the_source_mean(bert_source, target_bert, max_dim):
    ctx = _ctx(bert_source, target_bert)
    matrix, report = init_embeddings("source_mean", {"full_covariance_max_dim": max_dim}, ctx)
    rows = np.delete(matrix.double().numpy(), ctx.tok.pad_id, axis=0)
    assert report["fallback"] == len(rows) == ctx.tok.vocab_size - 1
    src = ctx.source_embeddings.double().numpy()
    # each coordinate's sample mean over n rows has standard error sd/sqrt(n); 5 standard errors over 64
    # coordinates is exceeded by chance with probability < 64 * 6e-7 (and the seed is fixed)
    se = src.std(0) / np.sqrt(len(rows))
    assert np.all(np.abs(rows.mean(0) - src.mean(0)) < 5 * se)
    assert np.allclose(rows.std(0), src.std(0), rtol=0.3)  # the spread is the source's, not a fixed std


def test_source_mean_draws_do_not_depend_on_the_thread_count():
    """A one-process run and a torchrun job (OMP_NUM_THREADS=1) draw the same fallback rows: MKL's float64 Cholesky
    factor has other bits on 2 threads than on 1 at hidden 256 (and 576..4096), so it is computed on one. Rows of
    rank 8 plus small noise, as anisotropic as real embeddings, carry the last-bit difference into float32."""
    from xpt_ds.embedding_init.strategies import sample_source_mean
    g = torch.Generator().manual_seed(0)
    src = torch.randn(2000, 8, generator=g) @ torch.randn(8, 256, generator=g) * 0.02 + \
        torch.randn(2000, 256, generator=g) * 1e-4
    threads, draws = torch.get_num_threads(), []
    try:
        for n in (2, 1):
            torch.set_num_threads(n)
            ctx = InitContext(None, src, "", torch.Generator().manual_seed(3), 0.02, {})
            draws.append(sample_source_mean(ctx, 4000))
            assert torch.get_num_threads() == n  # restored
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(*draws)


def test_random_draws_from_the_parameters_own_generator(bert_source, target_bert):
    """``random`` is nn.init.normal_(std) over the whole matrix from the context's generator (seeded with init_seed
    and the parameter's name: xpt_ds.model.values.stock_init), pad row zeroed; the global generator neither decides it
    nor moves."""
    ctx = _ctx(bert_source, target_bert)
    ctx.generator = torch.Generator().manual_seed(5)
    torch.manual_seed(1)
    matrix, report = init_embeddings("random", {}, ctx)
    moved = torch.rand(1)
    torch.manual_seed(1)
    assert torch.equal(moved, torch.rand(1))
    want = torch.nn.init.normal_(torch.empty(ctx.tok.vocab_size, ctx.hidden), std=ctx.std,
                                 generator=torch.Generator().manual_seed(5))
    want[ctx.tok.pad_id] = 0
    assert torch.equal(matrix, want)
    assert report["random"] == ctx.tok.vocab_size - 1 and report["zero"] == 1


def test_reruns_and_build_model_are_bitwise_identical(bert_source, target_bert):
    cfg = ModelConfig(source=str(bert_source), tokenizer=str(target_bert / "spm.model"), embedding_init="frequency_rank")
    tok = build_tokenizer(cfg.tokenizer)
    data = DataConfig(train_shards=[f"{target_bert}/manifest.json:train"])
    a, b = build_model(cfg, tok, data), build_model(cfg, tok, data)
    for x, y in zip(a.model.state_dict().values(), b.model.state_dict().values()):
        assert torch.equal(x, y)
    assert a.embedding_init == b.embedding_init and a.embedding_init["strategy"] == "frequency_rank"
    for name in ("source_mean", "overlap_copy"):
        m1, _ = init_embeddings(name, {}, _ctx(bert_source, target_bert))
        m2, _ = init_embeddings(name, {}, _ctx(bert_source, target_bert))
        assert torch.equal(m1, m2), name
    m3, _ = init_embeddings("source_mean", {}, _ctx(bert_source, target_bert, seed=99))
    assert not torch.equal(m1, m3)


def _write(prefix: Path, matrix: np.ndarray, tokenizer: dict, **meta) -> Path:
    from data_tools.embeddings.embedding_files import write_embeddings
    return write_embeddings(prefix, matrix, {"kind": meta.pop("kind", "static"), "tokenizer": tokenizer, **meta})


def _spm_identity(corpus: Path) -> dict:
    from data_tools.piece_tokenizers import SpmTokenizer
    return SpmTokenizer(corpus / "spm.model").identity()


def test_focus_known_answer(pair, tmp_path, caplog):
    """Static vectors are one-hot per piece, except that one non-overlapping piece t gets the vector of an
    overlapping piece a: sparsemax over cosines [1, 0, ..., 0] is one-hot, so t's row is a's source row exactly."""
    source, corpus = pair
    ctx = _ctx(source, corpus)
    shared = _expected_overlap(ctx)
    V = ctx.tok.vocab_size
    special = set(ctx.tok.special_ids)
    others = [i for i in range(V) if i not in shared and i not in special]
    t, a = others[0], sorted(shared)[3]
    static = np.eye(V, dtype=np.float32)
    static[t] = static[a]
    path = _write(tmp_path / "static", static, _spm_identity(corpus), unseen_ids=sorted(special))
    with caplog.at_level("WARNING", logger="xpt_ds.embedding_init.strategies"):
        matrix, report = init_embeddings("focus", {"static": str(path)}, ctx)
    assert "not FOCUS's auxiliary fastText space" in caplog.text  # a file without a method is word2vec's
    assert torch.equal(matrix[t], ctx.source_embeddings[shared[a]])
    # every other non-overlapping piece is orthogonal to all anchors: sparsemax of equal scores is uniform
    anchors = ctx.source_embeddings[[shared[i] for i in sorted(shared)]].double()
    assert torch.allclose(matrix[others[1]].double(), anchors.mean(0), atol=1e-6)
    assert report["copied"] == len(shared) and report["combined"] == len(others) and report["fallback"] == 0


def test_focus_reads_the_fasttext_space(bert_source, target_bert, tmp_path, caplog):
    """The file ``static_embeddings --method fasttext`` writes (FOCUS's auxiliary space over piece strings) is
    what ``focus`` reads: overlapping pieces copy, every other piece with a vector is a convex combination of
    the anchors' source rows, pieces below min_count fall back (FOCUS's "very rare" pieces)."""
    pytest.importorskip("gensim")
    from data_tools.embeddings.embedding_files import write_embeddings
    from data_tools.embeddings.fasttext_pieces import FastTextOptions, train_fasttext_embeddings
    from data_tools.embeddings.token_corpus import ShardCorpus
    matrix, meta = train_fasttext_embeddings(ShardCorpus(f"{target_bert}/manifest.json:train"),
                                             FastTextOptions(dim=16, min_count=3, bucket=5000))
    path = write_embeddings(tmp_path / "uk_focus", matrix, meta).with_suffix(".npy")
    ctx = _ctx(bert_source, target_bert)
    with caplog.at_level("WARNING", logger="xpt_ds.embedding_init.strategies"):
        rows, report = init_embeddings("focus", {"static": str(path)}, ctx)
    assert "FOCUS" not in caplog.text
    shared, special = _expected_overlap(ctx), set(ctx.tok.special_ids)
    seen = np.ones(ctx.tok.vocab_size, dtype=bool)
    seen[meta["unseen_ids"]] = False
    combined = [i for i in range(ctx.tok.vocab_size) if seen[i] and i not in shared and i not in special]
    assert report["copied"] == len(shared) and report["combined"] == len(combined) > 10
    assert report["fallback"] == ctx.tok.vocab_size - len(shared) - len(combined) - len(special)
    # a convex combination stays inside the anchors' bounding box
    anchors = ctx.source_embeddings[[shared[i] for i in sorted(shared) if seen[i]]]
    low, high = anchors.min(0).values - 1e-6, anchors.max(0).values + 1e-6
    assert ((rows[combined] >= low) & (rows[combined] <= high)).all()
    example = report["examples"]["combined"][0]["source"]
    assert example and all(w > 0 for _, w in example) and sum(w for _, w in example) <= 1 + 1e-4


def test_aligned_known_answer(pair, tmp_path):
    """Source static vectors one-hot per token; target piece t's mapped vector equals source token x's: its top
    weight is x's, softmax([1, 0, ...] / 0.1) over the top 10 (ties by id), and pieces without a vector fall back."""
    from data_tools.piece_tokenizers import HfTokenizer
    source, corpus = pair
    ctx = _ctx(source, corpus)
    stok = _source_tok(source)
    Vs, V = len(stok), ctx.tok.vocab_size
    x, t = stok.convert_tokens_to_ids("the" if "##s" in stok.get_vocab() else "Ġthe"), 20
    src_static = np.eye(Vs, dtype=np.float32)
    hf = HfTokenizer(source).identity()
    src_path = _write(tmp_path / "src", src_static, hf, unseen_ids=[])
    tgt = np.zeros((V, Vs), np.float32)
    tgt[t] = src_static[x]
    tgt_path = _write(tmp_path / "tgt", tgt, _spm_identity(corpus), kind="procrustes", source_tokenizer=hf,
                      unseen_ids=[i for i in range(V) if i != t])
    matrix, report = init_embeddings("aligned", {"target": str(tgt_path), "source": str(src_path)}, ctx)
    others = [j for j in range(Vs) if j != x and j not in stok.all_special_ids][:9]
    w = np.exp(np.array([10.0] + [0.0] * 9))
    w /= w.sum()
    expected = (torch.from_numpy(w) @ ctx.source_embeddings[[x] + others].double()).float()
    assert torch.equal(matrix[t], expected)
    assert report["combined"] == 1 and report["fallback"] == V - 1 - 5
    ex = report["examples"]["combined"][0]
    assert ex["id"] == t and ex["source"][0][0] == stok.convert_ids_to_tokens(x)


def test_from_file_checks_rows_and_tokenizer(bert_source, target_bert, tmp_path):
    ctx = _ctx(bert_source, target_bert)
    V, H = ctx.tok.vocab_size, ctx.hidden
    good = np.random.default_rng(0).normal(size=(V, H)).astype(np.float32)
    path = _write(tmp_path / "good", good, _spm_identity(target_bert), kind="input-embeddings")
    matrix, report = init_embeddings("from_file", {"path": str(path)}, ctx)
    good[ctx.tok.pad_id] = 0
    assert torch.equal(matrix, torch.from_numpy(good)) and report["copied"] == V - 1
    bad_rows = _write(tmp_path / "rows", np.zeros((V + 1, H), np.float32), _spm_identity(target_bert))
    other_tok = {**_spm_identity(target_bert), "sha256": "0" * 64}
    bad_tok = _write(tmp_path / "tok", np.zeros((V, H), np.float32), other_tok)
    for bad, why in ((bad_rows, f"has {V + 1} rows"), (bad_tok, "another tokenizer")):
        with pytest.raises(ConfigError) as e:
            init_embeddings("from_file", {"path": str(bad)}, _ctx(bert_source, target_bert))
        msg = str(e.value)
        assert "\n" not in msg and str(bad.with_suffix(".npy")) in msg and why in msg, msg
    bad_rows.with_suffix(".npy").write_bytes(path.with_suffix(".npy").read_bytes())  # sha256 no longer matches
    with pytest.raises(ConfigError, match="sha256 differs"):
        init_embeddings("from_file", {"path": str(bad_rows)}, _ctx(bert_source, target_bert))


def test_from_file_fills_unseen_rows_and_refuses_non_finite_ones(bert_source, target_bert, tmp_path):
    """Rows the sidecar lists as unseen are zeros with no trained vector: they start as the fallback (draws around
    the source mean), not as zero vectors; a NaN or inf row is one line naming the file and the row."""
    ctx = _ctx(bert_source, target_bert)
    V, H = ctx.tok.vocab_size, ctx.hidden
    rows = np.random.default_rng(0).normal(size=(V, H)).astype(np.float32)
    unseen = [ctx.tok.cls_id, ctx.tok.mask_id, 40]
    rows[unseen] = 0
    path = _write(tmp_path / "unseen", rows, _spm_identity(target_bert), kind="input-embeddings", unseen_ids=unseen)
    matrix, report = init_embeddings("from_file", {"path": str(path)}, ctx)
    assert report["copied"] == V - 1 - len(unseen) and report["fallback"] == len(unseen)
    assert all(matrix[i].norm() > 0 for i in unseen) and not matrix[ctx.tok.pad_id].any()
    seen = [i for i in range(V) if i not in unseen and i != ctx.tok.pad_id]
    assert torch.equal(matrix[seen], torch.from_numpy(rows[seen]))
    rows[7, 3] = np.nan
    bad = _write(tmp_path / "nan", rows, _spm_identity(target_bert), kind="input-embeddings", unseen_ids=unseen)
    with pytest.raises(ConfigError) as e:
        init_embeddings("from_file", {"path": str(bad)}, _ctx(bert_source, target_bert))
    assert "\n" not in str(e.value) and str(bad.with_suffix(".npy")) in str(e.value) and "row 7" in str(e.value)


def test_source_without_tokenizer_is_one_line(tiny_roberta, target_roberta):
    with pytest.raises(ConfigError) as e:
        init_embeddings("overlap_copy", {}, _ctx(tiny_roberta, target_roberta))
    assert "model.source" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("init, args, fragment", [
    ("focus", {"statc": "x.npy"}, "'model.embedding_init_args.statc'"),
    ("focus", {}, "'model.embedding_init_args.static' is required"),
    ("aligned", {"target": "t", "source": "s", "top_k": "many"}, "'model.embedding_init_args.top_k' must be an int"),
    ("random", {"seed": 1}, "'model.embedding_init_args.seed'"),
    ("wechsel", {}, "valid: random, source_mean, frequency_rank, overlap_copy, focus, aligned, from_file"),
])
def test_bad_embedding_init_args_are_one_line(tmp_path, init, args, fragment):
    cfg = base_config(tmp_path / "run", tmp_path, tmp_path)
    cfg["model"].update(embedding_init=init, embedding_init_args=args)
    with pytest.raises(ConfigError) as e:
        load_config(str(write_config(tmp_path / "c.yaml", cfg)))
    assert fragment in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_override_args_are_typed(tmp_path):
    cfg = base_config(tmp_path / "run", tmp_path, tmp_path)
    cfg["model"].update(embedding_init="aligned", embedding_init_args={"target": "t", "source": "s"})
    loaded = load_config(str(write_config(tmp_path / "c.yaml", cfg)), ["--model.embedding_init_args.top_k=5"])
    assert loaded.model.embedding_init_args == {"target": "t", "source": "s", "top_k": 5, "temperature": 0.1}


def test_two_ranks_agree_and_report_is_saved(tmp_path, bert_source, target_bert):
    """From a source without an MLM head (a BertModel checkpoint, whose head ``from_pretrained`` draws at load
    from ``model.init_seed``): both ranks start from the same weights, the drawn head and the
    ``frequency_rank`` rows included (test_reproducible's claim for a job, checked in this 2-rank run)."""
    import shutil

    from transformers import BertModel
    source = tmp_path / "headless"
    shutil.copytree(bert_source, source)  # its tokenizer files: frequency_rank reads the source's vocabulary
    BertModel.from_pretrained(bert_source).save_pretrained(source)  # encoder only, over the masked LM's files
    assert "cls.predictions.transform.dense.weight" not in load_file(source / "model.safetensors")
    cfg = base_config(tmp_path / "run", source, target_bert,
                      phases=[{"name": "phase1", "steps": 1, "lr": 1e-3}, {"name": "phase2", "steps": 1, "lr": 1e-3}])
    cfg["model"].update(embedding_init="frequency_rank")
    cfg["data"]["num_workers"] = 0
    proc = launch(["--config", str(write_config(tmp_path / "c.yaml", cfg))], nproc=2)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "initial weights identical on all 2 rank(s)" in out
    assert "embedding_init frequency_rank:" in out
    report = json.loads((tmp_path / "run/embedding_init.json").read_text())
    assert report["strategy"] == "frequency_rank" and report["special"] == 4
    from xpt_ds.checkpoint.store import read_client_state
    from xpt_ds.checkpoint.tags import complete_tags
    ckpt = tmp_path / "run/checkpoints"
    tags = complete_tags(ckpt)
    assert len(tags) == 2 and all(read_client_state(ckpt, t)["embedding_init"] == report for t in tags)
