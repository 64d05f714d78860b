"""The source tokenizer of ``extend-vocab``: loaded from a model directory, a hub id or a ``.gguf`` file (never
with remote code), its kind told from its ``tokenizers`` backend, and the text files it is extended from."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data_tools.errors import PrepareError
from data_tools.piece_tokenizers import HfTokenizer, check_vocabulary

KINDS = ("sentencepiece", "byte_level_bpe")


@dataclass
class Source:
    name: str  # as the user gave it (recorded in extend_vocab.json)
    tok: Any  # the transformers tokenizer, as transformers builds it for the source
    backend: dict  # tok.backend_tokenizer serialised: the pipeline the merged tokenizer.json extends
    kind: str  # one of KINDS
    spm_model: Path | None  # tokenizer.model of a SentencePiece source
    size: int  # len(tok): ids 0..size-1, checked contiguous


def load_source(name: str) -> Source:
    tok, directory = _load_tokenizer(name)
    if not hasattr(tok, "backend_tokenizer"):
        raise PrepareError(f"{name}: transformers built a {type(tok).__name__} without a 'tokenizers' backend; "
                           "extend-vocab extends a fast tokenizer (tokenizer.json or tokenizer.model)")
    backend = json.loads(tok.backend_tokenizer.to_str())
    _check_contiguous(name, tok)
    kind, spm_model = _kind(name, tok, backend, directory)
    return Source(name, tok, backend, kind, spm_model, len(tok))


def _load_tokenizer(name: str) -> tuple[Any, Path | None]:
    path = Path(name)
    if name.endswith(".gguf"):
        if not path.is_file():
            raise PrepareError(f"--source {name}: GGUF file not found")
        import transformers
        transformers.logging.set_verbosity_error()
        try:
            tok = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name,
                                                             trust_remote_code=False)
        except (OSError, ValueError, KeyError, TypeError) as e:
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise PrepareError(f"--source {name}: cannot read the GGUF file's tokenizer ({reason[:200]})") from None
        check_vocabulary(tok, name)
        return tok, None
    if path.is_file():
        raise PrepareError(f"--source {name} is a file: give a model directory, a hub id or a .gguf file")
    hf = HfTokenizer(name)  # a directory or a hub id; one-line errors for a missing or empty one
    return hf.tok, hf.path


def _check_contiguous(name: str, tok) -> None:
    """New pieces take ids len(tok).. : an id past the end, or a hole below it, would collide or leave an
    embedding row no token owns."""
    ids = sorted(set(tok.get_vocab().values()))
    if ids != list(range(len(tok))):
        hole = next((i for i, v in enumerate(ids) if v != i), len(ids))
        raise PrepareError(f"--source {name}: its token ids are not contiguous 0..{len(tok) - 1} (first missing "
                           f"id {hole}, largest id {ids[-1] if ids else None}); extend-vocab appends after the last")


def _types(node) -> set[str]:
    """Every component type named in a tokenizer.json section (Sequences nest)."""
    if isinstance(node, dict):
        found = {node["type"]} if isinstance(node.get("type"), str) else set()
        return found.union(*(_types(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_types(v) for v in node))
    return set()


def _kind(name: str, tok, backend: dict, directory: Path | None) -> tuple[str, Path | None]:
    model = backend["model"]
    pre = _types(backend.get("pre_tokenizer"))
    if model["type"] == "BPE" and "ByteLevel" in pre and not model.get("byte_fallback"):
        if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
            raise PrepareError(f"--source {name}: a byte-level BPE with a subword prefix/suffix is not supported")
        return "byte_level_bpe", None
    spm_model = directory / "tokenizer.model" if directory is not None else None
    looks_spm = model["type"] == "Unigram" or model.get("byte_fallback") or "Metaspace" in pre
    if spm_model is not None and spm_model.is_file():
        _check_matches_proto(name, tok, spm_model)
        return "sentencepiece", spm_model
    if looks_spm:
        raise PrepareError(f"--source {name}: a SentencePiece-based tokenizer without its tokenizer.model (a GGUF "
                           "file carries none); give the model directory or hub id")
    what = model["type"] + (f", pre-tokenizer {'/'.join(sorted(pre))}" if pre else "")
    raise PrepareError(f"--source {name}: its tokenizer is {what} ({type(tok).__name__}), neither "
                       f"SentencePiece-based nor byte-level BPE; extend-vocab extends only those")


def load_proto(path: Path):
    from sentencepiece import sentencepiece_model_pb2 as pb2
    proto = pb2.ModelProto()
    try:
        proto.ParseFromString(path.read_bytes())
    except Exception as e:  # protobuf's DecodeError and friends
        raise PrepareError(f"{path}: not a SentencePiece model ({type(e).__name__})") from None
    if not proto.pieces:
        raise PrepareError(f"{path}: not a SentencePiece model (no pieces)")
    return proto


def _check_matches_proto(name: str, tok, path: Path) -> None:
    """The merged tokenizer.model and tokenizer.json must agree id for id, so the source's must too."""
    pieces = [p.piece for p in load_proto(path).pieces]
    if len(tok) != len(pieces):
        raise PrepareError(f"--source {name}: its tokenizer has {len(tok)} tokens but its tokenizer.model "
                           f"{len(pieces)}; extend-vocab needs them equal (no tokens added beyond the model)")
    vocab = tok.get_vocab()
    differ = [p for i, p in enumerate(pieces) if vocab.get(p) != i]
    if differ:
        raise PrepareError(f"--source {name}: {len(differ)} piece(s) of tokenizer.model have another id in its "
                           f"tokenizer (first: {differ[0]!r})")


def read_lines(files: list[Path], what: str) -> list[str]:
    """The non-blank lines of UTF-8 text files, without their line ends."""
    lines: list[str] = []
    for f in files:
        with open(f, "rb") as fh:
            for n, raw in enumerate(fh, 1):
                try:
                    line = raw.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError:
                    raise PrepareError(f"{f}: line {n} is not valid UTF-8") from None
                if line.strip():
                    lines.append(line)
    if not lines:
        raise PrepareError(f"{what}: no text in {', '.join(map(str, files))} (only empty lines)")
    return lines


def pinned_vocab(backend: dict) -> dict[str, int]:
    """The BPE model's vocabulary with every added token in it at its id. ``tokenizers`` (0.23) gives an added
    token that the model lacks the next id after the model's vocabulary when it loads a tokenizer.json, whatever
    id the file says: with new pieces in the model, a Llama-3-like layout (specials after the model's pieces)
    would have its specials renumbered onto them."""
    vocab = dict(backend["model"]["vocab"])
    for t in backend.get("added_tokens", []):
        vocab.setdefault(t["content"], t["id"])
    return vocab
