"""data_tools' static subword embeddings (gensim word2vec over piece ids, fastText over piece strings: FOCUS's
space) and their alignment onto a source space (Procrustes, MUSE-style adversarial): file format, determinism,
rows by token id, rare-anchor hubs, error lines."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, one_error_line_of
from data_tools.errors import PrepareError
from data_tools.cli.align_embeddings import main as align_main
from data_tools.embeddings.adversarial import AdversarialOptions, fit_adversarial
from data_tools.embeddings.alignment import build_space
from data_tools.embeddings.embedding_files import read_embeddings, write_embeddings
from data_tools.embeddings.fasttext_pieces import FastTextOptions, train_fasttext_embeddings
from data_tools.embeddings.token_corpus import ShardCorpus, TextCorpus
from data_tools.embeddings.word2vec import TrainOptions, train_static_embeddings
from data_tools.piece_tokenizers import HfTokenizer, SpmTokenizer, sha256_file
from data_tools.cli.static_embeddings import build_parser as build_static_parser
from data_tools.pipeline.shards import write_manifest, write_shard
from data_tools.pipeline.spm.trainer import train_spm_from_sentences

pytest.importorskip("gensim", reason="pip install 'xpt-ds[embeddings]'")
# sample=0: with 45 pieces each has a frequency of ~2 %, which gensim's default 1e-3 down-sampling would thin
# to about a fifth
TINY = dict(dim=16, window=3, epochs=5, min_count=2, sample=0.0)
WORDS = ["кіт", "пес", "дім", "ліс", "сад", "рік", "мак", "сон", "дуб", "лан"]


def cli(module: str, *args, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})}, timeout=120)


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory) -> Path:
    """A 60-piece BERT-layout SentencePiece model ([PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4)."""
    rng = np.random.default_rng(0)
    letters = list("абвгдежзиклмнопрстуфхцчшщюяіїє")
    words = ["".join(rng.choice(letters, rng.integers(2, 7))) for _ in range(300)]
    sentences = [" ".join(rng.choice(words, 8)) for _ in range(500)]
    return train_spm_from_sentences(sentences, tmp_path_factory.mktemp("spm") / "spm", 60, family="bert")


def write_corpus(root: Path, spm: Path, docs: list[np.ndarray]) -> Path:
    """A prepared corpus by hand: one train shard of the given id arrays + manifest.json (shard_format.md)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "spm.model").write_bytes(spm.read_bytes())
    stats = write_shard(root / "train-000000.tar", "train", 0, [[d.tolist()] for d in docs], 60)
    return write_manifest(root, root / "spm.model", 60, {"train": {"shards": ["train-000000.tar"], **stats}})


@pytest.fixture(scope="module")
def paired_corpus(tmp_path_factory, spm_model) -> Path:
    """Random ids 5..49 plus, after 10 % of them, the phrase ``30 X 31`` with X either 20 or 21: pieces 20 and
    21 are interchangeable (same contexts) and occur nowhere else. Ids 50..59 never occur."""
    rng = np.random.default_rng(1)
    docs = []
    for _ in range(40):
        ids = []
        for i in rng.integers(5, 50, 150):
            if i not in (20, 21, 30, 31):
                ids.append(int(i))
            if rng.random() < 0.1:
                ids += [30, int(rng.choice([20, 21])), 31]
        docs.append(np.asarray(ids, dtype=np.uint16))
    return write_corpus(tmp_path_factory.mktemp("paired"), spm_model, docs)


def test_training_is_deterministic_across_processes(tmp_path, paired_corpus):
    """Two processes (each with its own salted str hash) write identical .npy bytes and sidecars."""
    outs = []
    for run in ("a", "b"):
        proc = cli("data_tools.cli.static_embeddings", "--shards", f"{paired_corpus}:train", "--out",
                   tmp_path / run / "uk", *[f"--{k.replace('_', '-')}={v}" for k, v in TINY.items()])
        assert proc.returncode == 0, proc.stderr
        outs.append(tmp_path / run / "uk")
    a, b = (read_embeddings(p.with_suffix(".npy")) for p in outs)
    assert a.path.read_bytes() == b.path.read_bytes()
    assert outs[0].with_suffix(".json").read_bytes() == outs[1].with_suffix(".json").read_bytes()
    assert a.meta["npy_sha256"] == b.meta["npy_sha256"] == a.sha256
    assert a.meta["library"]["name"] == "gensim" and a.meta["options"]["dim"] == 16


def test_rows_are_token_ids_and_unseen_rows_are_zero(paired_corpus):
    matrix, meta = train_static_embeddings(ShardCorpus(str(paired_corpus)), TrainOptions(**TINY))
    assert matrix.shape == (60, 16) and matrix.dtype == np.float32
    counts = np.asarray(meta["counts"])
    assert counts[20] > 200 and counts[21] > 200 and counts[:5].sum() == counts[50:].sum() == 0
    unseen = np.asarray(meta["unseen_ids"])
    assert set(unseen) == set(range(5)) | set(range(50, 60))  # specials never occur in shards
    assert not matrix[unseen].any() and np.abs(matrix[5:50]).sum(1).min() > 0
    unit = matrix[5:50] / np.linalg.norm(matrix[5:50], axis=1, keepdims=True)
    sims = unit @ unit.T
    np.fill_diagonal(sims, -1)
    assert sims[20 - 5].argmax() + 5 == 21 and sims[21 - 5].argmax() + 5 == 20  # each other's nearest piece
    assert sims[20 - 5, 21 - 5] > 0.9 > np.sort(sims[20 - 5])[-2] + 0.1
    assert meta["tokenizer"]["kind"] == "sentencepiece" and meta["corpus"]["tokens"] == counts.sum()


def _hf_tokenizer(path: Path, words: list[str] = [*WORDS, "never"]) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                            sep_token="[SEP]", mask_token="[MASK]").save_pretrained(path)
    return path


def test_text_with_a_hugging_face_tokenizer(tmp_path):
    """The source side: English-like text through an HF tokenizer; rows are that tokenizer's ids."""
    rng = np.random.default_rng(2)
    text = tmp_path / "en.txt"
    text.write_text("\n".join(" ".join(rng.choice(WORDS, 8)) for _ in range(200)) + "\n", encoding="utf-8")
    tok = HfTokenizer(_hf_tokenizer(tmp_path / "tok"))
    matrix, meta = train_static_embeddings(TextCorpus([text], tok), TrainOptions(**TINY))
    assert matrix.shape == (16, 16) and meta["unseen_ids"] == [0, 1, 2, 3, 4, 15]
    assert set(meta["tokenizer"]["files"]) >= {"tokenizer.json", "tokenizer_config.json"}
    assert meta["corpus"]["tokens"] == 1600 and meta["corpus"]["sequences"] == 200


def test_shards_of_a_hugging_face_tokenizer(tmp_path):
    """--shards on a manifest prepare wrote with --hf-tokenizer said "SentencePiece model not found: TOKDIR": its
    tokenizer_kind was never read. The tokenizer is checked as the trainer checks it, by its content sha256."""
    from data_tools.pipeline.run import run_pipeline
    rng = np.random.default_rng(3)
    text = tmp_path / "en.txt"
    text.write_text("\n\n".join(" ".join(rng.choice(WORDS, 8)) + "." for _ in range(40)) + "\n", encoding="utf-8")
    tok = _hf_tokenizer(tmp_path / "tok", [*WORDS, "."])
    run_pipeline([text], tmp_path / "data", hf_tokenizer=str(tok), valid=0, test=0)
    corpus = ShardCorpus(f"{tmp_path / 'data'}:train")
    assert isinstance(corpus.tokenizer, HfTokenizer) and corpus.vocab_size == 16
    matrix, meta = train_static_embeddings(corpus, TrainOptions(**TINY))
    assert matrix.shape == (16, 16) and meta["tokenizer"]["kind"] == "hf" and meta["unseen_ids"] == [0, 1, 2, 3, 4]
    manifest = tmp_path / "data/manifest.json"
    meta = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**meta, "tokenizer_content_sha256": "0" * 64}))  # the text's own sha256 agrees
    assert ShardCorpus(f"{tmp_path / 'data'}:train").vocab_size == 16
    manifest.write_text(json.dumps({**meta, "tokenizer_content_sha256": "0" * 64, "tokenizer_text_sha256": "1" * 64}))
    with pytest.raises(PrepareError, match=r"tok is not the Hugging Face tokenizer .*manifest\.json records"):
        ShardCorpus(f"{tmp_path / 'data'}:train")


def test_dictionary_pieces_are_unescaped(tmp_path):
    """dictionary.tsv escapes backslash, tab and newline in pieces; align-embeddings looked the escaped strings
    up as they were, so such pairs counted as unknown."""
    from data_tools.embeddings.bilingual_dict import read_dictionary
    from data_tools.pairs.dictionary import write_dictionary
    target, source = ["▁a", "b\\c", "t\tn\n"], ["x", "\\", "\\t"]
    write_dictionary(tmp_path / "d.tsv", (np.arange(3), np.array([1, 0, 2]), np.full(3, 5)), 2,
                     lambda ids: [target[i] for i in ids], lambda ids: [source[i] for i in ids])
    lookup = {"target": {p: i for i, p in enumerate(target)}, "source": {p: i for i, p in enumerate(source)}}
    d = read_dictionary(tmp_path / "d.tsv", lookup["target"].get, lookup["source"].get, np.ones(3, bool),
                        np.ones(3, bool))
    assert d.stats["used"] == 3 and d.target_ids.tolist() == [0, 1, 2] and d.source_ids.tolist() == [1, 0, 2]


def test_fasttext_cli_is_deterministic_and_records_its_method(tmp_path, paired_corpus):
    """--method fasttext: two processes write identical bytes; the sidecar names the method and every option;
    rows are piece ids, and pieces below --min-count are zero rows listed in unseen_ids (FOCUS's "very rare")."""
    opts = ["--method", "fasttext", "--dim", "16", "--min-count", "2", "--bucket", "5000", "--epochs", "2"]
    outs = []
    for run in ("a", "b"):
        proc = cli("data_tools.cli.static_embeddings", "--shards", f"{paired_corpus}:train",
                   "--out", tmp_path / run / "uk", *opts)
        assert proc.returncode == 0, proc.stderr
        assert "fasttext" in proc.stderr
        outs.append(tmp_path / run / "uk")
    assert outs[0].with_suffix(".npy").read_bytes() == outs[1].with_suffix(".npy").read_bytes()
    assert outs[0].with_suffix(".json").read_bytes() == outs[1].with_suffix(".json").read_bytes()
    emb = read_embeddings(outs[0].with_suffix(".npy"))
    meta, counts = emb.meta, emb.counts
    assert meta["kind"] == "static" and meta["method"] == "fasttext" and meta["library"]["model"] == "FastText"
    assert meta["options"] == {**vars(FastTextOptions(dim=16, min_count=2, bucket=5000, epochs=2)),
                               "method": "fasttext"}
    assert meta["options"]["algorithm"] == "cbow" and (meta["options"]["min_n"], meta["options"]["max_n"]) == (3, 6)
    assert emb.matrix.shape == (60, 16) and set(meta["unseen_ids"]) == set(np.flatnonzero(counts < 2))
    assert not emb.matrix[meta["unseen_ids"]].any() and np.abs(emb.matrix[emb.seen]).sum(1).min() > 0
    help_text = build_static_parser("fasttext").format_help()
    assert "training (fasttext)" in help_text and "(default: 100)" in help_text  # FOCUS's dim


def _rare_top_anchor_share(matrix: np.ndarray, meta: dict, rare: int = 30) -> float:
    """Every third seen piece is an anchor; the share of the other seen pieces whose most similar anchor (cosine,
    FOCUS's largest sparsemax weight) occurs fewer than ``rare`` times."""
    counts = np.asarray(meta["counts"])
    seen = np.setdiff1d(np.arange(len(counts)), meta["unseen_ids"])
    anchors, others = seen[::3], np.setdiff1d(seen, seen[::3])
    unit = matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
    top = anchors[(unit[others] @ unit[anchors].T).argmax(1)]
    assert 0.15 < (counts[anchors] < rare).mean() < 0.35  # the corpus has rare anchors to become hubs
    return float((counts[top] < rare).mean())


def test_fasttext_space_has_no_rare_anchor_hubs(tmp_path):
    """UA-GEC's issue in miniature: in the word2vec space of piece ids, pieces seen a few dozen times are the
    nearest anchor of far more rows than their share (on UA-GEC's 4,000 pieces `▁3000`, 27 occurrences, was the
    top source of 389 combined rows); in the fastText space of piece strings (FOCUS's) they are not.
    Zipf-distributed words of random Cyrillic letters, 200 pieces."""
    rng = np.random.default_rng(0)
    letters = list("абвгдежзиклмнопрстуфхцчшщюяіїє")
    words = ["".join(rng.choice(letters, rng.integers(2, 7))) for _ in range(400)]
    p = 1.0 / np.arange(1, len(words) + 1) ** 1.1
    sentences = [" ".join(rng.choice(words, 10, p=p / p.sum())) for _ in range(3000)]
    spm = train_spm_from_sentences(sentences, tmp_path / "spm", 200, family="bert")
    text = tmp_path / "uk.txt"
    text.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    corpus = TextCorpus([text], SpmTokenizer(spm))
    old = _rare_top_anchor_share(*train_static_embeddings(corpus, TrainOptions(dim=100)))
    new = _rare_top_anchor_share(*train_fasttext_embeddings(corpus, FastTextOptions(bucket=20_000)))
    assert new < 0.25 and old > 0.35, (new, old)  # measured: 0.12 and 0.46


def _rotation(dim: int, seed) -> np.ndarray:
    q, r = np.linalg.qr(np.random.default_rng(seed).normal(size=(dim, dim)))
    return (q * np.sign(np.diag(r))).astype(np.float32)


@pytest.mark.parametrize("normalize", ["none", "center,renorm"])
def test_procrustes_recovers_a_rotation_from_a_piece_dictionary(tmp_path, spm_model, normalize):
    """Target rows = the 55 spm pieces, source rows = Q (target rows) under an HF tokenizer with tokens w5..w59
    (same ids); the dictionary names 11 of the pairs by piece and token (header, count and probability
    columns) and one unknown piece. The fitted W is Q, and every seen row maps onto its source row."""
    sp = SpmTokenizer(spm_model)
    hf = HfTokenizer(_hf_tokenizer(tmp_path / "tok", [f"w{i}" for i in range(5, 60)]))
    x = (np.random.default_rng(3).normal(size=(60, 8)) + 2.0).astype(np.float32)  # off-centre: "center" matters
    x[:5] = 0  # special pieces: unseen
    q = _rotation(8, 4)
    write_embeddings(tmp_path / "uk", x, {"kind": "static", "tokenizer": sp.identity(), "unseen_ids": [0, 1, 2, 3, 4]})
    write_embeddings(tmp_path / "en", x @ q.T, {"kind": "static", "tokenizer": hf.identity(),
                                                "unseen_ids": [0, 1, 2, 3, 4]})
    tsv = tmp_path / "dictionary.tsv"
    tsv.write_text("target\tsource\tcount\tprobability\n" +
                   "".join(f"{sp.id_to_piece(i)}\tw{i}\t{i}\t0.5\n" for i in range(5, 60, 5)) +
                   "▁nosuchpiece\tw5\t1\t1.0\n", encoding="utf-8")
    align_main(["procrustes", "--target", str(tmp_path / "uk.npy"), "--source", str(tmp_path / "en.npy"),
                "--dictionary", str(tsv), "--out", str(tmp_path / "mapped"), "--normalize", normalize,
                "--weights", "count"])
    out = read_embeddings(tmp_path / "mapped.npy")
    np.testing.assert_allclose(np.load(tmp_path / "mapped.map.npy"), q, atol=1e-5)
    np.testing.assert_allclose(out.matrix[5:], x[5:] @ q.T, atol=1e-4)  # every seen row, not only the pairs
    assert not out.matrix[:5].any() and out.meta["unseen_ids"] == [0, 1, 2, 3, 4]
    diag = out.meta["diagnostics"]
    assert diag["pairs"]["used"] == 11 and diag["pairs"]["target_unknown"] == 1
    assert diag["mean_cosine_after"] > 0.9999 > diag["mean_cosine_before"]
    assert out.meta["tokenizer"]["sha256"] == sp.identity()["sha256"]
    assert out.meta["source_tokenizer"]["sha256"] == hf.identity()["sha256"]


def synthetic_spaces(n=400, dim=6, clusters=8, seed=3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Target x: a mixture of anisotropic Gaussian clusters of Zipfian sizes (structure the discriminator can
    see); source y = Q x + noise for a random rotation Q."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(clusters, dim)) * 2
    p = 1 / np.arange(1, clusters + 1) ** 0.7
    label = rng.choice(clusters, size=n, p=p / p.sum())
    shapes = np.stack([np.diag(np.exp(rng.uniform(-2.5, 0, dim))) @ _rotation(dim, rng) for _ in range(clusters)])
    x = centers[label] + np.einsum("nd,nde->ne", rng.normal(size=(n, dim)), shapes[label])
    q = _rotation(dim, np.random.default_rng(seed + 100))
    y = x @ q.T + 0.01 * rng.normal(size=(n, dim))
    return x.astype(np.float32), y.astype(np.float32), q


def _fit(x, y, **kw):
    ids = np.arange(len(x))
    xs, ys = build_space(x, ids, "center,renorm"), build_space(y, ids, "center,renorm")
    opts = AdversarialOptions(**{**dict(epochs=5, iterations=200, dis_hidden=64, dis_most_frequent=0,
                                        refinement=3, refine_max_rank=len(x), criterion_max_rank=len(x)), **kw})
    return fit_adversarial(xs, ys, opts, gold={i: {i} for i in range(len(x))})


def test_adversarial_mapping_finds_a_hidden_rotation():
    """From the identity (criterion ~0.6, precision@1 0) the unsupervised criterion and precision@1 by CSLS
    climb to ~1 and W to Q. Adversarial training is hit-or-miss at this scale, and which initialisation seed
    succeeds depends on the CPU's float kernels (at 200 iterations seed 0 found the rotation on one machine and
    none of seeds 0-7 on another). So, as MUSE users do, restarts: up to three seeds at 600 iterations, kept
    by the unsupervised criterion; on the 2-core CI machine seeds 0 and 1 each succeed (criterion 1.0)."""
    x, y, q = synthetic_spaces()
    for seed in range(3):
        w, diag = _fit(x, y, seed=seed, iterations=600)
        if diag["chosen"]["criterion"] > 0.99:
            break
    start, chosen = diag["identity"], diag["chosen"]
    assert start["criterion"] < 0.7 and start["precision_at_1"]["csls"] < 0.02
    assert chosen["criterion"] > 0.99, f"no restart found the rotation (last: {chosen['criterion']:.3f})"
    best = max(diag["epochs"] + diag["refinement"], key=lambda r: r["criterion"])
    assert best["precision_at_1"]["csls"] > 0.9 and np.abs(w - q).max() < 0.05


def test_adversarial_cli_is_deterministic(tmp_path):
    x, y, _ = synthetic_spaces(n=200, seed=1)
    write_embeddings(tmp_path / "x", x, {"kind": "static", "unseen_ids": []})
    write_embeddings(tmp_path / "y", y, {"kind": "input-embeddings", "unseen_ids": []})
    args = ["adversarial", "--target", str(tmp_path / "x.npy"), "--source", str(tmp_path / "y.npy"),
            "--epochs", "2", "--iterations", "20", "--dis-hidden", "32", "--refinement", "1",
            "--dictionary-columns", "ids"]
    for run in ("a", "b"):
        align_main([*args, "--out", str(tmp_path / run / "m")])
    a, b = (tmp_path / run / "m" for run in ("a", "b"))
    assert a.with_suffix(".npy").read_bytes() == b.with_suffix(".npy").read_bytes()
    assert a.with_suffix(".json").read_bytes() == b.with_suffix(".json").read_bytes()
    diag = json.loads(a.with_name("m.diagnostics.json").read_text())
    assert len(diag["epochs"]) == 2 and len(diag["refinement"]) == 1 and "chosen" in diag
    assert read_embeddings(a.with_suffix(".npy")).meta["kind"] == "adversarial"


def test_an_out_that_cannot_be_written_is_said_before_the_work(tmp_path, paired_corpus, monkeypatch, capsys):
    """static-embeddings trained and source-embeddings loaded the model before finding that --out could not be
    written, and the line named a temp file; align-embeddings now says it the same way."""
    import data_tools.cli.source_embeddings as source_cli
    import data_tools.cli.static_embeddings as static_cli

    def work(*args, **kwargs):
        raise AssertionError("the work began")
    monkeypatch.setattr(static_cli, "build_corpus", work)
    monkeypatch.setattr(source_cli, "input_embeddings", work)
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "emb"  # under a file: not writable, even for root
    for main, argv in [(static_cli.main, ["--shards", str(paired_corpus)]), (source_cli.main, ["--model", "m"]),
                       (align_main, ["procrustes", "--target", "t.npy", "--source", "s.npy", "--dictionary", "d"])]:
        with pytest.raises(SystemExit) as stop:
            main([*argv, "--out", str(out)])
        assert stop.value.code == 2
        assert capsys.readouterr().err.strip().splitlines() == [f"error: --out {out}: cannot write there "
                                                                f"({tmp_path / 'file'} is a file, not a folder)"]
    monkeypatch.setattr(static_cli, "build_corpus", lambda *args: 1 / 0)  # the work begins once --out is good
    with pytest.raises(ZeroDivisionError):
        static_cli.main(["--shards", str(paired_corpus), "--out", str(tmp_path / "new" / "emb")])
    assert list((tmp_path / "new").iterdir()) == []  # its folder made, the probe file gone


def test_one_line_errors(tmp_path, paired_corpus, spm_model):
    se, al = "data_tools.cli.static_embeddings", "data_tools.cli.align_embeddings"
    one_error_line_of(cli(se, "--shards", tmp_path / "none/manifest.json", "--out", tmp_path / "o"),
                   "manifest not found", "none/manifest.json")
    one_error_line_of(cli(se, "--text", tmp_path / "missing.txt", "--spm", spm_model, "--out", tmp_path / "o"),
                   "text file not found", "missing.txt")
    one_error_line_of(cli(se, "--shards", paired_corpus, "--out", tmp_path / "o", "--min-count", 10**6),
                   "no piece occurs --min-count 1000000 times")
    # a shard whose bytes changed since it was prepared
    changed = Path(shutil.copytree(Path(paired_corpus).parent, tmp_path / "changed"))
    manifest = json.loads((changed / "manifest.json").read_text())
    manifest["splits"]["train"]["shard_sha256"] = [sha256_file(changed / "train-000000.tar")]
    (changed / "manifest.json").write_text(json.dumps(manifest))
    with open(changed / "train-000000.tar", "ab") as shard:
        shard.write(bytes(1024))  # still a tar that reads
    one_error_line_of(cli(se, "--shards", changed, "--out", tmp_path / "o"),
                      "train-000000.tar: its sha256 is not the", "manifest.json records: its bytes changed")
    fake = tmp_path / "fake" / "gensim"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('simulated')\n")
    one_error_line_of(cli(se, "--shards", paired_corpus, "--out", tmp_path / "o",
                       env={"PYTHONPATH": f"{fake.parent}{os.pathsep}{REPO}"}),
                   "gensim is not installed", "pip install 'xpt-ds[embeddings]'")

    rng = np.random.default_rng(0)
    write_embeddings(tmp_path / "t", rng.normal(size=(60, 8)), {"kind": "static", "unseen_ids": [0]})
    write_embeddings(tmp_path / "s16", rng.normal(size=(30, 16)), {"kind": "input-embeddings", "unseen_ids": []})
    write_embeddings(tmp_path / "s8", rng.normal(size=(30, 8)), {"kind": "input-embeddings", "unseen_ids": []})
    common = ["--target", tmp_path / "t.npy", "--out", tmp_path / "m"]
    one_error_line_of(cli(al, "adversarial", *common, "--source", tmp_path / "s16.npy"),
                   "dimension mismatch", "dim 8", "dim 16", "--dim 16")
    one_error_line_of(cli(al, "adversarial", *common, "--source", tmp_path / "nope.npy"),
                   "embedding file not found", "nope.npy")
    tsv = tmp_path / "d.tsv"
    tsv.write_text("0\t1\n99\t2\n5\t99\n")  # unseen target row, target id out of range, source out of range
    one_error_line_of(cli(al, "procrustes", *common, "--source", tmp_path / "s8.npy", "--dictionary", tsv,
                       "--dictionary-columns", "ids"),
                   "d.tsv: no usable pairs", "3 lines", "1 target unknown", "1 source unknown", "1 target unusable")
    one_error_line_of(cli(al, "procrustes", *common, "--source", tmp_path / "s8.npy", "--dictionary", tsv),
                   "target embeddings record no tokenizer", "--target-tokenizer")
    (tmp_path / "s8.npy").write_bytes((tmp_path / "s16.npy").read_bytes())
    one_error_line_of(cli(al, "procrustes", *common, "--source", tmp_path / "s8.npy", "--dictionary", tsv),
                   "s8.npy does not match its sidecar")
