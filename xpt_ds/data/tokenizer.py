"""The tokenizer whose ids the shards hold: special ids for the trainer, HF files for export.

Usually the target-language SentencePiece model; for a method that keeps the source vocabulary (003's
``keep_vocab``) the source model's own Hugging Face tokenizer."""
from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm

from xpt_ds.config import ConfigError
from xpt_ds.data.spm_backend import read_proto, spm_backend, unconvertible
from xpt_ds.errors import first_line, no_file

MASK_CANDIDATES = ("<mask>", "[MASK]")
HF_TOKENIZER_DIR = "hf_tokenizer"  # in a checkpoint tag directory: the Hugging Face tokenizer of keep_vocab


@dataclass(frozen=True)
class TargetTokenizer:
    path: str
    vocab_size: int
    pad_id: int
    cls_id: int  # SentencePiece bos: <s> (RoBERTa) or [CLS] (BERT)
    sep_id: int  # SentencePiece eos: </s> (RoBERTa) or [SEP] (BERT)
    unk_id: int
    mask_id: int
    kind: str = "sentencepiece"  # or 'huggingface' (path is then the tokenizer's directory or hub id)
    content_sha256: str = ""  # huggingface: sha256 of the serialised backend (as data_tools records it)
    text_sha256: str = ""  # huggingface: the same less TEXT_SHA256_LESS (text_sha256)

    @property
    def special_ids(self) -> list[int]:
        return sorted({self.pad_id, self.cls_id, self.sep_id, self.unk_id, self.mask_id})

    @property
    def not_in_shards(self) -> tuple[int, ...]:
        """The ids a shard's text never holds (docs/shard_format.md): every special but unk, unless unk is also the
        bos or eos the reader puts around documents (GPT-2's one <|endoftext|>; ``unk = sep`` for a decoder
        tokenizer without an unk): such an id inside a shard would silently split its document."""
        text = {self.unk_id} - {self.cls_id, self.sep_id}
        return tuple(sorted({self.pad_id, self.cls_id, self.sep_id, self.mask_id} - text))

    def piece(self, i: int) -> str:
        if self.kind == "huggingface":
            return _load_hf(self.path).convert_ids_to_tokens(i)
        return _load(self.path).id_to_piece(i)

    def decode(self, ids: list[int]) -> str:
        """The text of ``ids``, as the tokenizer writes it."""
        if self.kind == "huggingface":
            return _load_hf(self.path).decode(ids)
        return _load(self.path).decode(ids)

    @property
    def marker_style(self) -> str:
        """How a piece's text marks word starts (``mlm_metrics.piece_chars``)."""
        if self.kind == "sentencepiece":
            return "sentencepiece"
        backend = _load_hf(self.path).backend_tokenizer
        if type(backend.model).__name__ == "WordPiece":
            return "wordpiece"
        return "byte_level" if "ByteLevel" in backend.to_str() else "sentencepiece"


def check_vocabulary(tok, path) -> None:
    """ValueError if ``tok`` has no vocabulary beyond its special tokens: transformers 5 builds such a tokenizer,
    without an error, for a model directory that holds no tokenizer files, and every word is then unknown."""
    if len(tok) <= len(set(tok.all_special_ids)):
        raise ValueError(f"{path} holds no tokenizer files: its tokenizer would know only its {len(tok)} special "
                         "tokens")


def rebuilt_by_auto(model_dir: Path, auto) -> bool:
    """Whether ``auto``, stock ``AutoTokenizer``'s tokenizer of an export with a SentencePiece vocabulary, encodes
    text otherwise than the fast tokenizer the export wrote (``tokenizer.json``): transformers 5 replaces the class
    a tokenizer_config.json names by its own for some model types, Qwen2's among them, which rebuilds a byte-level
    BPE from the vocabulary and gives other ids. The text is the first 200 ordinary pieces of ``spm.model``."""
    from transformers import PreTrainedTokenizerFast
    if getattr(auto, "backend_tokenizer", None) is None:  # a tokenizer of its own code: nothing to compare
        return False
    sp = _load(str(Path(model_dir) / "spm.model"))
    text = sp.decode([i for i in range(sp.get_piece_size()) if not sp.is_control(i) and not sp.is_unknown(i)][:200])
    written = PreTrainedTokenizerFast.from_pretrained(str(model_dir))
    return auto.backend_tokenizer.encode(text).ids != written.backend_tokenizer.encode(text).ids


def model_tokenizer(location: str, **kw):
    """A model's Hugging Face tokenizer: ``AutoTokenizer.from_pretrained(location, **kw)``, except for an export
    whose stock class is rebuilt otherwise (``rebuilt_by_auto``): the tokenizer it wrote, which gives the ids of
    its ``spm.model``, the ids it was trained on."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast
    auto = AutoTokenizer.from_pretrained(location, **kw)
    here = Path(location)
    if (here / "spm.model").is_file() and (here / "tokenizer.json").is_file() and rebuilt_by_auto(here, auto):
        return PreTrainedTokenizerFast.from_pretrained(location, **{k: v for k, v in kw.items()
                                                                    if k != "trust_remote_code"})
    return auto


@functools.lru_cache(maxsize=4)
def _load_hf(path: str):
    """A directory's or hub id's tokenizer, or a ``.gguf`` file's (``xpt_ds.io.gguf_tokenizer``)."""
    from transformers import AutoTokenizer

    from xpt_ds.io.gguf_tokenizer import load_gguf_tokenizer
    if path.endswith(".gguf"):  # its special tokens as the file states them
        tok = load_gguf_tokenizer(Path(path))
    else:
        tok = AutoTokenizer.from_pretrained(path, trust_remote_code=False)  # never a directory's own code
    check_vocabulary(tok, path)
    return tok


def spare_pad(hf) -> int | None:
    """The pad of a decoder's rows whose tokenizer pads with eos, bos or unk or not at all, and whose embedding rows
    must stay the source's (keep_vocab: no row can be added): its first special token that is none of bos, eos and unk
    (SmolLM2's ``<repo_name>``, Llama 3's reserved tokens). A shard may not hold it (one that does is refused as
    corrupt); a trailing pad is never predicted nor attended by a position that predicts
    (``xpt_ds.data.causal``), so its row is never trained. None: the tokenizer has no such token."""
    taken = {hf.bos_token_id, hf.eos_token_id, hf.unk_token_id}
    return next((i for i, t in sorted(hf.added_tokens_decoder.items()) if t.special and i not in taken), None)


def build_hf_tokenizer(path: str, what: str = "config key 'model.tokenizer'",
                       causal: bool | None = False) -> TargetTokenizer:
    """Special ids of a Hugging Face tokenizer (directory, hub id or ``.gguf`` file); a missing tokenizer or
    special token is a one-line error naming ``what`` and ``path``. ``causal`` (a decoder's: method extend or
    keep_vocab): a document starts with bos (eos where the tokenizer has none) and ends with eos (the cls and sep
    of the shards' rows), unk may be absent (byte-level BPE has none) and nothing is masked; it needs a pad
    distinct from eos, which is
    ``spare_pad``'s where the tokenizer pads with eos or not at all, and also where it pads with bos or unk (Llama's
    common ``pad_token = unk_token``) if it has a spare: the embedding row of a pad is zeroed or frozen, and the rows
    hold bos and unk elsewhere. None: causal if the tokenizer has no mask or no cls token (a saved decoder
    tokenizer)."""
    try:
        hf = _load_hf(path)
    except (OSError, ValueError, TypeError) as e:
        why = first_line(e)
        raise ConfigError(f"{what}: cannot load a Hugging Face tokenizer from {path} ({why})") from None
    if causal is None:
        causal = hf.mask_token_id is None or hf.cls_token_id is None
    ids = {"pad": hf.pad_token_id, "cls": hf.cls_token_id, "sep": hf.sep_token_id, "unk": hf.unk_token_id,
           "mask": hf.mask_token_id}
    if causal:  # a tokenizer without bos (Qwen2's, Qwen3's) starts documents with eos: what its pretraining read
        first = hf.bos_token_id if hf.bos_token_id is not None else hf.eos_token_id  # between documents
        ids = {"pad": hf.pad_token_id, "cls": first, "sep": hf.eos_token_id}
        if ids["pad"] is None or ids["pad"] in (ids["sep"], ids["cls"], hf.unk_token_id):
            spare = spare_pad(hf)  # with none, a pad that is bos or unk stays (a row's end is its last eos)
            ids["pad"] = spare if spare is not None or ids["pad"] == ids["sep"] else ids["pad"]
        if ids["sep"] is None:
            raise ConfigError(f"{what}: Hugging Face tokenizer {path} has no eos token, which a decoder's rows need")
        if ids["pad"] is None:
            raise ConfigError(f"{what}: Hugging Face tokenizer {path} has no pad other than its eos "
                              f"{hf.eos_token!r} and no other special token to pad with, which a decoder's rows "
                              "need (xpt-data extend-vocab adds one to an extended vocabulary; keep_vocab keeps the "
                              "source's rows, so only a token the source has can pad)")
        ids["unk"] = hf.unk_token_id if hf.unk_token_id is not None else ids["sep"]
        ids["mask"] = ids["pad"]  # nothing is masked; an id the shards never hold
    missing = [k for k, v in ids.items() if v is None]
    if missing:
        raise ConfigError(f"{what}: Hugging Face tokenizer {path} has no {', '.join(missing)} token")
    backend = getattr(hf, "backend_tokenizer", None)
    if backend is None:
        raise ConfigError(f"{what}: {path} has no fast (tokenizers) backend")
    return TargetTokenizer(path=str(path), vocab_size=len(hf), pad_id=ids["pad"], cls_id=ids["cls"],
                           sep_id=ids["sep"], unk_id=ids["unk"], mask_id=ids["mask"], kind="huggingface",
                           content_sha256=hashlib.sha256(backend.to_str().encode()).hexdigest(),
                           text_sha256=text_sha256(backend))


# What a tokenizer's text sha256 leaves out of its serialised backend: the special tokens a post-processor puts
# around a text (shards hold none: the reader puts bos and eos; a decoder's export makes its tokenizer put bos
# first), padding and truncation. data_tools.piece_tokenizers.TEXT_SHA256_LESS is the same (docs/shard_format.md).
TEXT_SHA256_LESS = ("post_processor", "padding", "truncation")


def text_sha256(backend) -> str:
    """sha256 of what turns text into ids: a ``tokenizers`` backend's JSON less ``TEXT_SHA256_LESS``, keys sorted."""
    spec = json.loads(backend.to_str())
    spec.update(dict.fromkeys(TEXT_SHA256_LESS))
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def tokenizer_for(model_cfg, causal: bool = False) -> TargetTokenizer:
    """The run's tokenizer: the source's Hugging Face tokenizer for a method that keeps the source vocabulary
    (``model.tokenizer`` names it, or is empty for ``model.source``'s own: a directory, hub id or ``.gguf`` file),
    else the SentencePiece model. ``causal``: the source is a decoder (``build_hf_tokenizer``)."""
    from xpt_ds.config.methods import METHODS
    if METHODS[model_cfg.method].vocab == "source":
        key = "model.tokenizer" if model_cfg.tokenizer else "model.source"
        return build_hf_tokenizer(model_cfg.tokenizer or model_cfg.source, f"config key '{key}'", causal=causal)
    if METHODS[model_cfg.method].vocab == "extend":  # the source's, extended (xpt-data extend-vocab)
        if not Path(model_cfg.tokenizer).is_dir():
            raise ConfigError(f"config key 'model.tokenizer': {model_cfg.tokenizer!r} is not a directory; method "
                              "extend takes the directory `xpt-data extend-vocab --out DIR` writes")
        return build_hf_tokenizer(model_cfg.tokenizer, causal=True)
    tok = build_tokenizer(model_cfg.tokenizer, model_cfg.mask_token, causal=causal)
    why = unconvertible(read_proto(tok.path))  # said before training, not at the export
    if why is not None:
        raise ConfigError(f"config key 'model.tokenizer': {tok.path} cannot be written as an export's Hugging Face "
                          f"tokenizer that encodes as it does: {why}")
    return tok


def saved_tokenizer(directory: Path, mask_token: str = "") -> TargetTokenizer:
    """The tokenizer a checkpoint tag directory or an export holds: ``spm.model`` if present, else the Hugging
    Face tokenizer in ``hf_tokenizer/`` (checkpoints of keep_vocab) or in the directory itself (its export).
    ``mask_token``: the run's ``model.mask_token`` (a checkpoint's caller reads it from the run's config); without
    it, an export's own ``tokenizer_config.json`` names it. Until 2026-12-05 a run that set ``model.mask_token``
    was evaluated and exported with the default mask piece, masking with another id than it trained with."""
    directory = Path(directory)
    spm_file = directory / "spm.model"
    if spm_file.is_file():
        try:  # said here: build_tokenizer's line names config key 'model.tokenizer', which did not name this file
            _load(str(spm_file))
        except (RuntimeError, OSError) as e:
            raise ConfigError(f"{directory}: its {spm_file.name} is not a SentencePiece model ({first_line(e)}); "
                              "copy it from another checkpoint of the run or its export (they hold the same "
                              "file)") from None
        return build_tokenizer(str(spm_file), mask_token or _named_mask_token(directory), causal=None)
    for d in (directory / HF_TOKENIZER_DIR, directory):
        if (d / "tokenizer_config.json").is_file():
            return build_hf_tokenizer(str(d), f"saved tokenizer {d}", causal=None)
    raise FileNotFoundError(f"{directory} has no spm.model and no Hugging Face tokenizer")


def _named_mask_token(directory: Path) -> str:
    """The mask piece an export's ``tokenizer_config.json`` names (a string, or an AddedToken's ``content``), or
    "" (a checkpoint tag directory, or none named: the default candidates)."""
    try:
        named = json.loads((directory / "tokenizer_config.json").read_text()).get("mask_token")
    except (OSError, ValueError, AttributeError):
        return ""
    named = named.get("content") if isinstance(named, dict) else named
    return named if isinstance(named, str) else ""


def loadable_by_transformers_4(out_dir: Path) -> None:
    """transformers 5 records a fast tokenizer's class as ``TokenizersBackend``, which transformers 4 lacks: its
    ``AutoTokenizer`` refused every export. ``PreTrainedTokenizerFast`` is the same class in 5 (an alias) and
    4's loader of a tokenizer.json."""
    path = Path(out_dir) / "tokenizer_config.json"
    cfg = json.loads(path.read_text())
    if cfg.get("tokenizer_class") == "TokenizersBackend":
        cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
        path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")


def copy_hf_tokenizer(path: str, out_dir: Path) -> None:
    """Write the Hugging Face tokenizer at ``path`` (directory or hub id) to ``out_dir`` (``save_pretrained``:
    what stock ``AutoTokenizer.from_pretrained`` loads)."""
    _load_hf(str(path)).save_pretrained(str(out_dir))


def export_causal_hf_tokenizer(tok: TargetTokenizer, out_dir: Path, model_max_length: int) -> str | None:
    """Write a decoder run's Hugging Face tokenizer (extend, keep_vocab: ``tok``, as its checkpoint saved it) for
    its export, set as training read text: bos first (every training document starts with it,
    ``xpt_ds.data.causal``; a tokenizer that puts none, GPT-2's and SmolLM2's, is made to), the run's pad, padding
    on the left, as batched ``generate`` needs, and no longer rows than the model takes. The source's own settings
    (right padding, no bos, a length of 1e30) made stock batched generation continue padded prompts wrongly. Returns
    what the written tokenizer, loaded back with stock ``AutoTokenizer``, still does otherwise (None: nothing)."""
    from transformers import AutoTokenizer
    own = _load_hf(str(tok.path))
    hf = AutoTokenizer.from_pretrained(tok.path, trust_remote_code=False, padding_side="left",
                                       model_max_length=min(own.model_max_length, model_max_length))
    if hf.pad_token_id != tok.pad_id:
        hf.pad_token = hf.convert_ids_to_tokens(tok.pad_id)
    if hf.bos_token_id is None:  # training started documents with eos (build_hf_tokenizer): its bos now
        hf.bos_token = hf.convert_ids_to_tokens(tok.cls_id)
    if hf("a")["input_ids"][:1] != [tok.cls_id] and hasattr(hf, "add_bos_token"):
        hf.add_bos_token = True  # transformers rewrites the post-processor, and records it
    hf.save_pretrained(str(out_dir))
    loadable_by_transformers_4(out_dir)
    back = AutoTokenizer.from_pretrained(str(out_dir), trust_remote_code=False)
    ids, padded = back("a")["input_ids"], back(["a", "a a a"], padding=True)["input_ids"][0]
    if ids[:1] != [tok.cls_id] or ids[1:2] == [tok.cls_id]:
        return f"it starts text with {ids[:2]}, where training started each document with bos {tok.cls_id} once"
    if back.pad_token_id != tok.pad_id or padded[:1] != [tok.pad_id] or back.model_max_length > model_max_length:
        return (f"it pads with {back.pad_token_id} on the {back.padding_side} up to {back.model_max_length}, not with "
                f"{tok.pad_id} on the left up to {model_max_length}")
    return None


@functools.lru_cache(maxsize=8)
def _load(path: str) -> spm.SentencePieceProcessor:
    return spm.SentencePieceProcessor(model_file=path)


def build_tokenizer(path: str, mask_token: str = "", causal: bool | None = False) -> TargetTokenizer:
    """Read special-token ids; a missing file or special piece is a one-line error. ``causal`` (a decoder's rows,
    ``xpt_ds.data.causal``): nothing is masked, so a model without a mask piece (SentencePiece's defaults, as
    Llama-style tokenizers are trained) is taken, its mask id the pad's, an id the shards never hold, as
    ``build_hf_tokenizer`` does; until 2026-12-06 a decoder run refused it, and ``model.mask_token`` is refused for
    decoders. None: a saved tokenizer (a checkpoint's or an export's), which its run's checks passed.
    ``data_tools.pipeline.spm.given`` checks a ``prepare --tokenizer`` model for the same ids."""
    if not Path(path).is_file():
        raise ConfigError(f"config key 'model.tokenizer': {no_file(path, 'SentencePiece model')}")
    try:
        sp = _load(path)
    except (RuntimeError, OSError) as e:
        raise ConfigError(f"config key 'model.tokenizer': {path} is not a SentencePiece model ({e})") from None
    ids = {"pad": sp.pad_id(), "bos": sp.bos_id(), "eos": sp.eos_id(), "unk": sp.unk_id()}
    missing = [k for k, v in ids.items() if v < 0]
    if missing:
        named = ", ".join(f"{k}_id" for k in missing)
        add = (f"add one after its last piece, no id changing (xpt-data spm-specials --tokenizer {path} --out "
               "NEW.model --pad '<pad>'; the shards need tokenizing with it), " if missing == ["pad"] else "")
        raise ConfigError(f"config key 'model.tokenizer': {path} has no {' or '.join(missing)} piece ({named} -1), "
                          "which training needs (documents start with bos and end with eos, rows are padded with "
                          f"pad): {add}train it again with {named} set (spm_train --{missing[0]}_id=N ...), or "
                          "let `python -m data_tools prepare` train one")
    candidates = (mask_token,) if mask_token else MASK_CANDIDATES
    mask_ids = [sp.piece_to_id(t) for t in candidates if sp.piece_to_id(t) != sp.unk_id()]
    if not mask_ids and causal is not False and not mask_token:
        mask_ids = [sp.pad_id()]  # nothing is masked
    if not mask_ids:
        raise ConfigError(f"config key 'model.tokenizer': {path} has no mask piece (looked for "
                          f"{', '.join(candidates)}), which an encoder's masked LM needs (model.mask_token names "
                          f"another piece of it; xpt-data spm-specials --tokenizer {path} --out NEW.model --mask "
                          "'<mask>' adds one, no id changing)")
    return TargetTokenizer(path=path, vocab_size=sp.get_piece_size(), pad_id=sp.pad_id(), cls_id=sp.bos_id(),
                           sep_id=sp.eos_id(), unk_id=sp.unk_id(), mask_id=mask_ids[0])


def save_hf_tokenizer(tok: TargetTokenizer, out_dir: Path, model_max_length: int, token_types: int,
                      causal: bool = False) -> None:
    """Write tokenizer.json etc. that stock ``AutoTokenizer.from_pretrained`` loads, with the same ids as spm.
    Pairs follow the model family: with ``token_types`` > 1 BERT's ``[CLS] A [SEP] B [SEP]`` with B in segment 1;
    otherwise RoBERTa's ``<s> A </s></s> B </s>`` all in segment 0 (its only token type). ``causal`` (a decoder):
    ``<s> A`` with no ``</s>``, as a document starts in training (``xpt_ds.data.causal``), so ``generate``
    continues the text; padding on the left, as batched generation needs."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    backend = spm_backend(tok.path)
    cls, sep = tok.piece(tok.cls_id), tok.piece(tok.sep_id)
    if causal:
        single, pair = f"{cls} $A", f"{cls} $A {sep} $B"
    else:
        single = f"{cls} $A {sep}"
        pair = f"{cls} $A {sep} $B:1 {sep}:1" if token_types > 1 else f"{cls} $A {sep} {sep} $B {sep}"
    backend.post_processor = processors.TemplateProcessing(
        single=single, pair=pair, special_tokens=[(cls, tok.cls_id), (sep, tok.sep_id)])
    hf = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token=cls, eos_token=sep, cls_token=cls, sep_token=sep,
        pad_token=tok.piece(tok.pad_id), unk_token=tok.piece(tok.unk_id),
        mask_token=tok.piece(tok.mask_id) if tok.mask_id != tok.pad_id else None,  # a decoder's without one
        model_max_length=model_max_length, padding_side="left" if causal else "right",
        model_input_names=["input_ids", "token_type_ids", "attention_mask"] if token_types > 1
        else ["input_ids", "attention_mask"])
    hf.save_pretrained(str(out_dir))
    loadable_by_transformers_4(out_dir)
    (Path(out_dir) / "spm.model").write_bytes(Path(tok.path).read_bytes())
