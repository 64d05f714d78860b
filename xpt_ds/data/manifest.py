"""Which shards a run reads, and what their manifest says (docs/shard_format.md): ``manifest.json:split``, brace
patterns and paths expanded to shard files; the tokenizer a manifest records, checked against the run's; the
documents, tokens and sha256 it records per shard (checked when each shard is opened: ``xpt_ds.data.shards``).
Plain files only (no torch), so a sweep checks its shards without loading a model."""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import braceexpand

from xpt_ds.config import ConfigError
from xpt_ds.errors import no_file

if TYPE_CHECKING:
    from xpt_ds.data.tokenizer import TargetTokenizer

FORMAT_VERSION = 1
HF_WRITER_VERSION = 3  # data_tools' shards.HF_WRITER_VERSION: a document encoded as one text (its sentences joined)
log = logging.getLogger(__name__)
_WARNED: set[Path] = set()


def _check_manifest_tokenizer(manifest: Path, meta: dict, tok: TargetTokenizer) -> None:
    kind = meta.get("tokenizer_kind", "sentencepiece")  # manifests before --hf-tokenizer have no kind
    if kind != tok.kind:
        raise ConfigError(f"manifest {manifest} was tokenized with a {kind} tokenizer ({meta.get('tokenizer')}) "
                          f"but the run's tokenizer {tok.path} is {tok.kind}")
    if meta.get("vocab_size") != tok.vocab_size:
        raise ConfigError(f"manifest {manifest} has vocab_size {meta.get('vocab_size')} but model.tokenizer "
                          f"{tok.path} has {tok.vocab_size}: the shards were made with another tokenizer")
    if kind == "huggingface":  # the serialised backend: survives save_pretrained, unlike the files' bytes
        text = meta.get("tokenizer_text_sha256")  # manifests written before 2026-12-04 lack it
        if meta.get("tokenizer_content_sha256") != tok.content_sha256 and (text is None or text != tok.text_sha256):
            older = "" if text is not None else (
                "; this manifest, written before 2026-12-04, records the whole tokenizer, and a decoder's export puts "
                "bos before text where its run's tokenizer did not: run the same xpt-data prepare command again, "
                "which keeps the shards and records what turns text into ids")
            recorded = str(meta.get("tokenizer_content_sha256"))[:12]
            raise ConfigError(f"manifest {manifest} was tokenized with Hugging Face tokenizer "
                              f"{meta.get('tokenizer')}, not with {tok.path} (content sha256 {recorded}… vs "
                              f"{tok.content_sha256[:12]}…){older}")
        if meta.get("writer_version", 0) < HF_WRITER_VERSION and manifest not in _WARNED:
            _WARNED.add(manifest)  # a run checks a manifest per pattern and per stream: one warning is enough
            log.warning("manifest %s was written by xpt-data prepare before 2026-12-03, which encoded a document's "
                        "sentences one by one: with a byte-level BPE tokenizer (GPT-2, Llama 3, Qwen) its shards "
                        "lack the space between sentences ('dog.Is'); run the same prepare command again, which "
                        "rewrites them", manifest)
        return
    sha = hashlib.sha256(Path(tok.path).read_bytes()).hexdigest()
    if meta.get("tokenizer_sha256") not in (None, sha):
        raise ConfigError(f"manifest {manifest} was tokenized with a different SentencePiece model than "
                          f"model.tokenizer {tok.path} (sha256 {meta['tokenizer_sha256'][:12]}… vs {sha[:12]}…)")


def read_manifest(manifest: Path, what: str = "") -> dict:
    """A manifest's JSON, checked for the layout every reader relies on (an object whose ``splits`` map each
    split to an object with a ``shards`` list of file names); anything else raises one line naming the file
    (``what``: a config key to start it with)."""
    where = f"{what}: manifest {manifest}" if what else f"manifest {manifest}"
    try:
        meta = json.loads(manifest.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{what + ': ' if what else ''}manifest not found: {manifest}") from None
    except OSError as e:
        raise ConfigError(f"{where}: cannot read it ({e.strerror or e})") from None
    except ValueError as e:  # bad JSON or bad UTF-8
        raise ConfigError(f"{where}: not valid JSON ({str(e).splitlines()[0][:120]})") from None
    splits = meta.get("splits") if isinstance(meta, dict) else None
    if not isinstance(splits, dict):
        raise ConfigError(f"{where}: not a shard manifest (no 'splits' object)")
    for name, entry in splits.items():
        shards = entry.get("shards") if isinstance(entry, dict) else None
        if not isinstance(shards, list) or not all(isinstance(x, str) for x in shards):
            raise ConfigError(f"{where}: splits.{name}.shards must be a list of shard file names")
        for key in ("shard_documents", "shard_tokens"):
            if key in entry and (not isinstance(entry[key], list) or len(entry[key]) != len(shards)):
                raise ConfigError(f"{where}: splits.{name}.{key} must list one count per shard ({len(shards)}), "
                                  f"got {str(entry[key])[:80]}")
    return meta


def expand_shards(specs: list[str], tok: TargetTokenizer | None = None) -> list[str]:
    """Paths, brace patterns (``train-{000000..000003}.tar``) or ``manifest.json:split``.

    With ``tok``, a manifest must record the same tokenizer (vocab size and sha256)."""
    out = []
    for spec in specs:
        path, _, split = spec.partition(".json:")
        if split:
            manifest = Path(path + ".json")
            meta = read_manifest(manifest)
            if meta.get("format_version") != FORMAT_VERSION:
                raise ConfigError(f"manifest {manifest} has format_version {meta.get('format_version')}, "
                                  f"expected {FORMAT_VERSION}")
            if tok is not None:
                _check_manifest_tokenizer(manifest, meta, tok)
            if split not in meta["splits"]:
                raise ConfigError(f"manifest {manifest} has no split '{split}' (has {', '.join(meta['splits'])})")
            out += [str(manifest.parent / s) for s in meta["splits"][split]["shards"]]
        else:
            paths = list(braceexpand.braceexpand(spec))
            if tok is not None:
                _check_beside_manifest(paths, tok)
            out += paths
    for s in out:
        if not Path(s).is_file():
            raise ConfigError(no_file(s, "shard", spec=True))
    return out


def _beside_manifest(folder: Path) -> tuple[dict, set[str]] | None:
    """(the manifest in ``folder``, the shard names it lists), or None where there is none readable."""
    try:
        meta = read_manifest(folder / "manifest.json")
    except ConfigError:
        return None
    return meta, {name for split in meta["splits"].values() for name in split["shards"]}


def _check_beside_manifest(paths: list[str], tok: TargetTokenizer) -> None:
    """Shards named by path, not through their manifest: the manifest beside them, when it lists them, is read
    for the tokenizer it records, so shards of another tokenizer fail by path too (other shards: no record)."""
    for folder in dict.fromkeys(Path(p).parent for p in paths):
        found = _beside_manifest(folder)
        if found and any(Path(p).name in found[1] for p in paths if Path(p).parent == folder):
            _check_manifest_tokenizer(folder / "manifest.json", found[0], tok)


def manifest_counts(specs: list[str]) -> dict[str, tuple]:
    """Shard path -> (documents, tokens, sha256 or None) the manifests among ``specs`` record; for shards named
    by path, the manifest beside them records them where it lists them (the tokenizer check's manifest)."""
    counts = {}
    for spec in specs:
        path, _, split = spec.partition(".json:")
        if split:
            manifest = Path(path + ".json")
            counts.update(_split_counts(manifest, split, read_manifest(manifest)["splits"][split]))
            continue
        paths = list(braceexpand.braceexpand(spec))
        for folder in dict.fromkeys(Path(p).parent for p in paths):
            if (found := _beside_manifest(folder)) is None:
                continue
            listed = {}
            for name, entry in found[0]["splits"].items():
                listed.update(_split_counts(folder / "manifest.json", name, entry))
            counts.update({p: listed[str(folder / Path(p).name)] for p in paths
                           if Path(p).parent == folder and str(folder / Path(p).name) in listed})
    return counts


def _split_counts(manifest: Path, split: str, entry: dict) -> dict[str, tuple]:
    """What one split records per shard: ``shard_documents``/``shard_tokens``/``shard_sha256``, or the split's
    totals when it has one shard (manifests written before per-shard counts). Manifests written before
    ``shard_sha256`` give None for it."""
    shards = [str(manifest.parent / s) for s in entry["shards"]]
    digests = entry.get("shard_sha256", [None] * len(shards))
    if not isinstance(digests, list) or len(digests) != len(shards):
        raise ConfigError(f"manifest {manifest}: splits.{split}.shard_sha256 must list one sha256 per shard "
                          f"({len(shards)}), got {str(digests)[:80]}")
    if "shard_documents" in entry and "shard_tokens" in entry:
        return dict(zip(shards, zip(entry["shard_documents"], entry["shard_tokens"], digests)))
    if len(shards) == 1 and "documents" in entry and "tokens" in entry:
        return {shards[0]: (entry["documents"], entry["tokens"], digests[0])}
    return {}
