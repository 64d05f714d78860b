"""Write WebDataset tar shards of per-document token-id arrays plus manifest.json (docs/shard_format.md).

Tokenization is planned first and executed second, so the output does not depend on the number of workers:

1. ``plan_split`` reads a split's ``sentences/{split}.jsonl`` (one JSON list of sentences per line) once, as
   bytes, and cuts it into shards: ``shard_docs`` documents each, or about ``shard_tokens`` tokens each (sizes
   estimated from the UTF-8 length of each line and a bytes-per-token ratio measured on the first
   ``SAMPLE_BYTES`` of that file, so a shard holds a whole number of documents and roughly that many tokens).
2. ``write_shard_task`` (one call per shard, in any process) tokenizes its byte range of the file and writes
   ``{name}.tmpPID``, fsyncs it, renames it to ``{name}`` and only then records completion in
   ``.prepare/shards/{name}.json`` with a key over everything the shard depends on (tokenizer sha256, split
   file sha256, byte range, first document, dtype). A shard counts as complete only when that record exists
   with the current key and the shard's size matches it, so a leftover temp file or a shard whose record was
   never written is redone.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import json
import os
import tarfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from data_tools.errors import PrepareError
from data_tools.piece_tokenizers import sha256_file

FORMAT_VERSION = 1
WRITER_VERSION = 2  # bump when the bytes written for the same inputs change (2: special tokens spelled in the text
# become unk)
HF_WRITER_VERSION = 3  # --hf-tokenizer's shards, counted on from WRITER_VERSION (3: a document is encoded as one text,
# so a byte-level BPE keeps the space between its sentences); SentencePiece shards did not change, so their keys and
# an earlier run's SentencePiece shards stay valid
SAMPLE_BYTES = 1 << 20
RECORDS = Path(".prepare") / "shards"


def id_dtype(vocab_size: int):
    return np.uint16 if vocab_size <= 65536 else np.uint32


def shard_name(split: str, index: int) -> str:
    return f"{split}-{index:06d}.tar"


def doc_key(split: str, shard: int, doc: int) -> str:
    """Unique across the corpus; ``doc`` counts documents across the whole split."""
    return f"{split}-{shard:06d}-{doc:08d}"


def add_document(tar: tarfile.TarFile, key: str, ids: np.ndarray) -> None:
    """One sample: ``{key}.ids.npy``. TarInfo defaults (mtime 0, uid 0, mode 0644) keep shards byte-identical."""
    buf = io.BytesIO()
    np.save(buf, ids, allow_pickle=False)
    info = tarfile.TarInfo(f"{key}.ids.npy")
    info.size = buf.tell()
    buf.seek(0)
    tar.addfile(info, buf)


def write_shard(path: Path, split: str, index: int, docs: Iterable[Iterable[Iterable[int]]], vocab_size: int,
                first_doc: int = 0) -> dict:
    """Write one shard of documents (each a list of sentences' token ids) directly to ``path``; for callers
    and tests that hold ids already. Returns documents/sentences/tokens counts."""
    dtype = id_dtype(vocab_size)
    n_docs = n_sent = n_tok = 0
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for i, sentences in enumerate(docs):
            sentences = [list(s) for s in sentences]
            ids = np.fromiter(itertools.chain.from_iterable(sentences), dtype=dtype)
            add_document(tar, doc_key(split, index, first_doc + i), ids)
            n_docs, n_sent, n_tok = n_docs + 1, n_sent + len(sentences), n_tok + len(ids)
    return {"documents": n_docs, "sentences": n_sent, "tokens": n_tok}


@dataclass(frozen=True)
class ShardTask:
    """One shard to write: documents ``first_doc .. first_doc + n_docs - 1`` of ``source`` at bytes
    ``[start, end)``."""
    out_dir: str
    split: str
    index: int
    source: str
    start: int
    end: int
    first_doc: int
    n_docs: int
    tokenizer: str
    dtype: str
    key: str

    @property
    def name(self) -> str:
        return shard_name(self.split, self.index)


def sentences_of(line: bytes, path, lineno: int) -> list[str]:
    """One document of a ``sentences/*.jsonl`` file: a JSON list of sentences. A hand-written or damaged file is
    one PrepareError naming the file and line, not a traceback."""
    try:
        doc = json.loads(line)
    except ValueError:
        doc = None
    if not isinstance(doc, list) or not all(isinstance(s, str) for s in doc):
        what = "a blank line" if not line.strip() else "not a JSON list of sentences"
        raise PrepareError(f"{path}:{lineno}: {what} (a sentences file holds one JSON list of strings per line, "
                           "one line per document)")
    return doc


def _key(**fields) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def _bytes_per_token(source: Path, sp) -> float:
    """UTF-8 bytes of the split file per token, from its first SAMPLE_BYTES (whole lines)."""
    with open(source, "rb") as f:
        head = f.read(SAMPLE_BYTES) + f.readline()  # the rest of a line the sample cuts (a long document)
    lines = [(i, ln) for i, ln in enumerate(head.split(b"\n"), 1) if ln.strip()]
    if not lines:
        return 4.0
    tokens = sum(len(ids) for i, ln in lines for ids in sp.encode(sentences_of(ln, source, i), num_threads=1))
    return sum(len(ln) + 1 for _, ln in lines) / max(1, tokens)


def _identity(path: Path) -> list[int]:
    """What changes when a file is rewritten or replaced, short of reading it: ctime and inode too, which no
    ``touch -m`` sets back."""
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _cut(source: Path, sp, shard_tokens: int | None, shard_docs: int | None) -> tuple[list, str]:
    """(start, end, first_doc, n_docs) of each shard of ``source``, and the file's sha256: one read of it."""
    target_bytes = None if shard_docs else max(1.0, shard_tokens * _bytes_per_token(source, sp))
    bounds: list[tuple[int, int, int, int]] = []  # (start, end, first_doc, n_docs)
    sha = hashlib.sha256()
    start = pos = doc = first = 0
    with open(source, "rb") as f:
        for line in f:
            sha.update(line)
            if not line.strip():
                sentences_of(line, source, doc + 1)  # the one-line error
            if doc > first and (doc - first >= shard_docs if shard_docs else pos - start >= target_bytes):
                bounds.append((start, pos, first, doc - first))
                start, first = pos, doc
            pos += len(line)
            doc += 1
    if doc > first:
        bounds.append((start, pos, first, doc - first))
    return bounds, sha.hexdigest()


def plan_split(out_dir: Path, split: str, source: Path, tokenizer: Path, tokenizer_sha256: str, vocab_size: int,
               sp, shard_tokens: int | None, shard_docs: int | None, cache: Path | None = None,
               recorded_sha256: str | None = None) -> tuple[list[ShardTask], str, bool]:
    """Cut ``source`` into shards (see module docstring); returns the tasks, the file's sha256 and whether the cut
    came from ``cache``. The cut depends on the file's bytes, the tokenizer and the shard size only: ``cache``
    keeps it with the file's identity (size, mtime, ctime, inode), so a rerun on an unchanged file does not read
    it again; a cut whose sha256 is not ``recorded_sha256`` (the split stage's record of the file) is not used."""
    if shard_docs is not None and shard_docs < 1 or shard_docs is None and (shard_tokens or 0) < 1:
        raise ValueError("shard_docs or shard_tokens must be >= 1")
    dtype = np.dtype(id_dtype(vocab_size)).name
    params = {"tokenizer": tokenizer_sha256, "shard_tokens": None if shard_docs else shard_tokens,
              "shard_docs": shard_docs, "file": _identity(source)}
    try:
        kept = json.loads(cache.read_text()) if cache is not None else None
    except (OSError, ValueError):
        kept = None
    if kept and kept.get("params") == params and recorded_sha256 in (None, kept.get("sha256")):
        bounds, file_sha, cached = [tuple(b) for b in kept["bounds"]], kept["sha256"], True
    else:
        bounds, file_sha = _cut(source, sp, shard_tokens, shard_docs)
        cached = False
        if cache is not None and recorded_sha256 in (None, file_sha):
            atomic_write_text(cache, json.dumps({"params": params, "sha256": file_sha, "bounds": bounds}) + "\n")
    tasks = []
    for index, (s, e, fd, n) in enumerate(bounds):
        key = _key(format_version=FORMAT_VERSION, writer=writer_version(sp), tokenizer=tokenizer_sha256,
                   source=file_sha, start=s, end=e, first_doc=fd, n_docs=n, dtype=dtype, name=shard_name(split, index))
        tasks.append(ShardTask(str(out_dir), split, index, str(source), s, e, fd, n, str(tokenizer), dtype, key))
    return tasks, file_sha, cached


def _record_path(task: ShardTask) -> Path:
    return Path(task.out_dir) / RECORDS / f"{task.name}.json"


def completed(task: ShardTask) -> dict | None:
    """The shard's completion record if it is complete for exactly this task, else None."""
    try:
        rec = json.loads(_record_path(task).read_text())
        size = (Path(task.out_dir) / task.name).stat().st_size
    except (OSError, ValueError):
        return None
    return rec if rec.get("key") == task.key and rec.get("bytes") == size else None


def forget(task: ShardTask) -> None:
    _record_path(task).unlink(missing_ok=True)


@contextlib.contextmanager
def whole_file(path: Path, mode: str = "wb", **kw):
    """``path``'s new content, written to ``PATH.tmpPID`` (per process: an orphan of a killed run may linger),
    fsynced and renamed over it: a reader never sees it half written. A failure (a full disk, a file-size limit)
    removes the temporary file, leaves ``path`` as it was, and names ``path`` in its OSError, whose write() or
    fsync() names no file."""
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, mode, **kw) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and e.filename is None and e.errno is not None:
            raise OSError(e.errno, e.strerror, str(path)) from None
        raise


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with whole_file(path, "w", encoding="utf-8") as f:
        f.write(text)


_PROCESSORS: dict[str, object] = {}


def writer_version(sp) -> int:
    """The writer version of the shards ``sp`` (an encoder below, or a SentencePiece processor) writes."""
    return HF_WRITER_VERSION if isinstance(sp, HfEncoder) else WRITER_VERSION


class HfEncoder:
    """A Hugging Face tokenizer (a transformers tokenizer, or the path of a local directory) behind SentencePiece's
    ``encode(lines, num_threads=)``: ids without special tokens. Text that spells a special token (a literal
    "[MASK]") is split as plain text, so shards never hold special ids (docs/shard_format.md)."""

    def __init__(self, tok):
        if isinstance(tok, (str, Path)):
            from data_tools.piece_tokenizers import HfTokenizer
            tok = HfTokenizer(tok).tok
        self.tok = tok
        self.unk_id = tok.unk_token_id  # None: a byte-level BPE, which has none

    def encode(self, lines: list[str], num_threads: int = 1) -> list[list[int]]:
        if not lines:
            return []
        return self.tok(list(lines), add_special_tokens=False, split_special_tokens=True)["input_ids"]

    def encode_document(self, sentences: list[str]) -> list[int]:
        """The ids of the document's text, its sentences joined by a space: a byte-level BPE (GPT-2, Llama 3,
        Qwen) marks a word's leading space in its piece (``Ġ``), so sentences encoded one by one and concatenated
        would read ``dog.Is``; WordPiece and Metaspace tokenizers give the same ids either way."""
        return self.encode([" ".join(sentences)])[0] if sentences else []


class SpmEncoder:
    """A SentencePiece model behind ``encode(lines, num_threads=)``. The mask is a user-defined symbol, which
    SentencePiece matches in plain text too: a literal "[MASK]" (or "<mask>") in the corpus became the mask id. It,
    and any pad, bos or eos id, becomes unk instead (``specials`` counts them), so shards never hold special ids
    (docs/shard_format.md)."""

    def __init__(self, path: str):
        import sentencepiece as spm
        self.sp = spm.SentencePieceProcessor(model_file=path)
        user = [i for i in range(self.sp.get_piece_size()) if self.sp.is_control(i) or self.sp.is_unknown(i)
                or self.sp.id_to_piece(i) in ("[MASK]", "<mask>")]
        self.forbidden = sorted({i for i in user if i != self.sp.unk_id()})
        self.specials = 0
        self.unk_id = self.sp.unk_id()

    def encode(self, lines: list[str], num_threads: int = 1) -> list[list[int]]:
        # One call a line: sentencepiece 0.2.3's call on a list takes 1.8x as long on one thread (a document's
        # sentences, 2026-12-04), and slows further when processes run it side by side (--workers).
        pieces = [self.sp.encode(x) for x in lines] if num_threads <= 1 else self.sp.encode(lines,
                                                                                          num_threads=num_threads)
        if self.forbidden:
            bad = set(self.forbidden)
            for row in pieces:
                if not bad.isdisjoint(row):  # rare: the loop in Python only then
                    for j, i in enumerate(row):
                        if i in bad:
                            row[j] = self.sp.unk_id()
                            self.specials += 1
        return pieces

    def encode_document(self, sentences: list[str]) -> list[int]:
        """Each sentence on its own, concatenated: SentencePiece gives every sentence's first word the ``▁`` of a
        space before it, so the space between sentences is kept, and the bytes are writer version 2's."""
        return list(itertools.chain.from_iterable(self.encode(sentences)))


def _processor(path: str):
    """A SentencePiece model file, or a Hugging Face tokenizer directory (``--hf-tokenizer``)."""
    if path not in _PROCESSORS:
        _PROCESSORS[path] = HfEncoder(path) if Path(path).is_dir() else SpmEncoder(path)
    return _PROCESSORS[path]


def write_shard_task(task: ShardTask) -> dict:
    """Tokenize and write one planned shard atomically, then record its completion. Returns the record."""
    sp = _processor(task.tokenizer)
    specials_before = getattr(sp, "specials", 0)
    dtype = np.dtype(task.dtype)
    final = Path(task.out_dir) / task.name
    forget(task)
    n_sent = n_tok = n_unk = 0
    with open(task.source, "rb") as src, whole_file(final) as fh:
        src.seek(task.start)
        with tarfile.open(fileobj=fh, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for i in range(task.n_docs):
                sentences = sentences_of(src.readline(), task.source, task.first_doc + i + 1)  # line = document
                ids = np.asarray(sp.encode_document(sentences), dtype=dtype)
                count = len(ids)
                add_document(tar, doc_key(task.split, task.index, task.first_doc + i), ids)
                n_sent += len(sentences)
                n_tok += count
                n_unk += int(np.count_nonzero(ids == sp.unk_id)) if sp.unk_id is not None else 0
        if src.tell() != task.end:
            raise RuntimeError(f"{task.source} changed while tokenizing (shard {task.name}); re-run")
    record = {"key": task.key, "shard": task.name, "documents": task.n_docs, "sentences": n_sent, "tokens": n_tok,
              "unk": n_unk, "bytes": final.stat().st_size, "sha256": sha256_file(final),
              "task": {k: v for k, v in asdict(task).items() if k != "out_dir"},
              "special_spellings": getattr(sp, "specials", 0) - specials_before}
    atomic_write_text(_record_path(task), json.dumps(record, indent=1))
    return record


def hf_manifest_keys(tok) -> dict:
    """The manifest's record of a Hugging Face tokenizer (``piece_tokenizers.HfTokenizer``): its path, a sha256
    over its tokenizer files, and a sha256 of its serialised backend (``tokenizer.json`` as the ``tokenizers``
    library writes it: normaliser, pre-tokenizer, vocabulary, added tokens), which survives ``save_pretrained``,
    and of that backend less what puts special tokens around a text (``text_sha256``); the trainer compares them."""
    ident = tok.identity()
    return {"tokenizer": ident["path"], "tokenizer_sha256": ident["sha256"], "tokenizer_kind": "huggingface",
            "tokenizer_name": ident["name"], "tokenizer_files": ident["files"],
            "tokenizer_content_sha256": tok.content_sha256(), "tokenizer_text_sha256": tok.text_sha256()}


def write_manifest(out_dir: Path, tokenizer: Path | dict, vocab_size: int, splits: dict[str, dict], **extra) -> Path:
    """manifest.json (format_version 1), written atomically; ``extra`` keys are informational. ``tokenizer``:
    the SentencePiece model file, or the ``hf_manifest_keys`` of a Hugging Face tokenizer."""
    if isinstance(tokenizer, dict):
        tok_keys = tokenizer
    else:
        tok_keys = {"tokenizer": tokenizer.name, "tokenizer_sha256": hashlib.sha256(tokenizer.read_bytes()).hexdigest(),
                    "tokenizer_kind": "sentencepiece"}
    manifest = {"format_version": FORMAT_VERSION, "vocab_size": vocab_size, **tok_keys, "splits": splits, **extra}
    path = out_dir / "manifest.json"
    atomic_write_text(path, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return path
