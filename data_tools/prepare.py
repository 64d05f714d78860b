"""``python -m data_tools.prepare --input FILE... --out DIR``: text -> sentences -> splits -> SentencePiece -> shards.

Input: plain-text files (UTF-8), one paragraph per line, documents separated by blank lines.
Output in DIR: spm.model/spm.vocab, {train,valid,test}-NNNNNN.tar shards, manifest.json.
"""
from __future__ import annotations

import argparse
import re
import tempfile
import unicodedata
from pathlib import Path

import numpy as np
import sentencepiece as spm

from data_tools.shards import ShardWriter, write_manifest
from data_tools.spm_train import LAYOUTS, train_spm

# Split after sentence-final punctuation followed by whitespace (covers Korean "…다." and CJK full stops).
_SENT_END = re.compile(r"(?<=[.!?。！？])\s+")


def split_sentences(paragraph: str) -> list[str]:
    return [s.strip() for s in _SENT_END.split(paragraph) if s.strip()]


def read_documents(paths: list[Path], normalize: str = "NFKC", doc_boundary: str = "blank") -> list[list[str]]:
    """Documents as lists of sentences; an undecodable line is reported with file and line number.

    ``doc_boundary``: 'blank' = a blank line ends a document, 'file' = each file is one document."""
    docs: list[list[str]] = []
    for path in paths:
        current: list[str] = []
        with open(path, "rb") as f:
            for lineno, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise ValueError(f"{path}:{lineno}: invalid UTF-8 ({e.reason})") from None
                line = unicodedata.normalize(normalize, line).strip() if normalize else line.strip()
                if not line and doc_boundary == "blank":
                    if current:
                        docs.append(current)
                    current = []
                current += split_sentences(line)
        if current:
            docs.append(current)
    if not docs:
        raise ValueError(f"no text in {', '.join(map(str, paths))}")
    return docs


def dedupe(docs: list[list[str]], min_chars: int) -> list[list[str]]:
    """Drop exact duplicate sentences (first occurrence wins) and sentences shorter than ``min_chars``."""
    seen: set[str] = set()
    out = []
    for doc in docs:
        kept = [s for s in doc if len(s) >= min_chars and not (s in seen or seen.add(s))]
        if kept:
            out.append(kept)
    return out


def split_documents(docs: list[list[str]], valid: float, test: float, seed: int) -> dict[str, list[list[str]]]:
    """By document, so no sentence leaks across splits; deterministic given the seed."""
    order = np.random.default_rng(seed).permutation(len(docs))
    n_valid, n_test = max(1, round(valid * len(docs))), max(1, round(test * len(docs)))
    if n_valid + n_test >= len(docs):
        raise ValueError(f"{len(docs)} documents cannot give {n_valid} valid + {n_test} test + >=1 train")
    pick = lambda idx: [docs[i] for i in sorted(idx)]  # noqa: E731
    return {"train": pick(order[n_valid + n_test:]), "valid": pick(order[:n_valid]),
            "test": pick(order[n_valid:n_valid + n_test])}


def prepare(inputs: list[Path], out: Path, vocab_size: int, family: str = "roberta", valid: float = 0.05,
            test: float = 0.05, seed: int = 0, min_chars: int = 2, shard_tokens: int = 50_000_000,
            doc_boundary: str = "blank") -> Path:
    out.mkdir(parents=True, exist_ok=True)
    splits = split_documents(dedupe(read_documents(inputs, doc_boundary=doc_boundary), min_chars), valid, test, seed)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write("\n".join(s for doc in splits["train"] for s in doc) + "\n")
    try:
        model = train_spm(Path(f.name), out / "spm", vocab_size, family)
    except RuntimeError as e:  # e.g. "Vocabulary size too high (8000). Please set it to a value <= 3105."
        raise ValueError(f"SentencePiece training failed: {str(e).strip().splitlines()[-1]}") from None
    finally:
        Path(f.name).unlink()
    sp = spm.SentencePieceProcessor(model_file=str(model))
    summary = {}
    for name, docs in splits.items():
        writer = ShardWriter(out, name, sp.get_piece_size(), shard_tokens)
        for doc in docs:
            writer.write(sp.encode(doc))
        writer.close()
        summary[name] = writer.summary()
    return write_manifest(out, model, sp.get_piece_size(), summary)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--input", nargs="+", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--vocab-size", type=int, default=50_000)
    p.add_argument("--family", default="roberta", choices=sorted(LAYOUTS))
    p.add_argument("--valid", type=float, default=0.05, help="fraction of documents")
    p.add_argument("--test", type=float, default=0.05, help="fraction of documents")
    p.add_argument("--shard-tokens", type=int, default=50_000_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--doc-boundary", default="blank", choices=["blank", "file"],
                   help="a blank line ends a document, or each file is one document")
    a = p.parse_args()
    try:
        path = prepare(a.input, a.out, a.vocab_size, a.family, a.valid, a.test, a.seed, shard_tokens=a.shard_tokens,
                       doc_boundary=a.doc_boundary)
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"error: {e}")
    print(path)


if __name__ == "__main__":
    main()
