"""Bits per byte of raw text under a decoder's own tokenizer: ``xpt-ds evaluate --model M --text FILE [FILE ...]``.

``M`` is any decoder: an ``xpt-ds export`` of any method (xpt, extend, lora, keep_vocab, ...), a stock Hugging Face
directory or hub id xpt-ds did not write (the English source itself, from the Hugging Face cache or the hub, as
``model.source`` reads it), or a ``.gguf`` file (transformers dequantizes it).
Loading runs no code from the directory (``xpt_ds.io.trust``: only this xpt-ds's own export code, or
``--trust-remote-code``); the tokenizer never runs any. So "what did the adaptation cost English?" is two
commands on the same English file, one for the source and one for the export, whatever the method.

Each non-blank line of a UTF-8 file is a document. It is tokenized alone by the model's own tokenizer (no special
tokens), and the tokenizer's bos is put first, or its eos where it has no bos (Qwen2's kind: read as the end of a
document before, lm-evaluation-harness's prefix token): the document's first piece is predicted from it and scored
like every other, so the bytes it covers are paid for (the JSON's ``first_token`` says which token). A tokenizer
with neither is refused: nothing would predict the first piece, and its bytes cannot be told apart from the rest's
(a byte-level piece may hold part of a character). Documents never see each other. A document longer than
``seq_len`` predictions is cut into windows of ``seq_len``: window k reads pieces kL .. kL+L-1 (bos or eos counted)
and predicts the next one each, so every piece is predicted once, and a window's first prediction has the previous
window's last piece as its only context (lm-evaluation-harness's rolling windows do the same). A window longer than
``BATCH_TOKENS`` pieces (a long document under a long-context model: Llama 3 reads 131,072) runs alone,
``BATCH_TOKENS`` positions at a time, each part reading the earlier ones from the model's key-value cache: the
logits of one forward pass stay ``BATCH_TOKENS`` x vocabulary (2.1 GB in float32 at Llama 3's 128,256 pieces)
however long the window, where the whole window's would be 67 GB at 131,072 positions. The cache gives one pass's
figures to float32 rounding (the same bits for SmolLM2-135M's 8,192-piece window of 280 joined Bible verses,
RESULTS.md).

Reported per file: ``nats`` (summed next-piece cross-entropy), ``tokens`` (pieces predicted), ``bytes`` (UTF-8
bytes of the documents, line ends not counted; nothing predicts a document's end), ``bits_per_byte`` = nats /
ln 2 / bytes, and ``pieces_per_word`` (the documents' pieces over their whitespace-separated words). Bits per
byte is the figure that compares across tokenizers: every model pays for the same bytes, however it cuts them.

Offline English text: the English side of the Bible pairs, ``xpt-data bible extract`` -> ``en.txt`` (the Berean
Standard Bible, public domain as the ``bible-alignments`` 0.4.2 package states it; the package's code is MIT,
its alignment data CC BY 4.0). Ukrainian: ``xpt-data uagec`` -> ``text/test.txt`` (UA-GEC, ``ua-gec`` 2.1.3,
CC BY 4.0).
"""
from __future__ import annotations

import inspect
import math
from pathlib import Path

import torch

from xpt_ds.errors import UserError, first_line

DEFAULT_SEQ_LEN = 1024  # a model whose config states no maximum
BATCH_TOKENS = 4096  # padded pieces per forward pass: fp32 logits [4096, vocab] are 0.8 GB at 49K pieces


def load_decoder(path: Path, trust_remote_code: bool = False, dtype: str = "float32", what: str = ""):
    """(causal LM in ``dtype`` (a torch dtype's name, or ``auto``: as its files store it), its own Hugging Face
    tokenizer) of an export or stock decoder directory, a .gguf file, or a hub id (the Hugging Face cache, else the
    hub, as ``model.source`` reads one); a missing path or tokenizer, an encoder, or weights that would run code is
    one line naming ``what`` (``--model PATH`` unless given)."""
    from transformers import AutoModelForCausalLM

    from xpt_ds.io.trust import read_config_dict, reading_weights, remote_code_consent
    what, name = what or f"--model {path}", str(path)
    if path.suffix == ".gguf" and not path.is_dir():  # transformers reads GGUF decoders only, and runs no code
        if not path.is_file():
            raise UserError(f"{what}: no such .gguf file")
        location, extra, trusted = str(path.parent), {"gguf_file": path.name}, False
    else:
        if path.is_dir():
            from xpt_ds.evaluation.intrinsic import check_not_a_run
            check_not_a_run(path)
        else:  # a misspelt directory is said at once; a hub id is looked up in the cache, then asked of the hub
            from xpt_ds.io.model_source import check_model_source
            check_model_source(name, what)
        check_decoder(read_config_dict(name), what)
        location, extra, trusted = name, {}, remote_code_consent(name, trust_remote_code)
    tokenizer = own_tokenizer(path, location, extra, what)  # before the weights: a missing tokenizer fails at once
    with reading_weights(what):
        model = AutoModelForCausalLM.from_pretrained(location, trust_remote_code=trusted,
                                                     dtype=dtype if dtype == "auto" else getattr(torch, dtype), **extra)
    return model.eval(), tokenizer


def check_decoder(config: dict, what: str) -> None:
    from xpt_ds.model.decoder import is_causal_lm
    if is_causal_lm(config):
        return
    archs = config.get("architectures") or []
    raise UserError(f"{what} is a {config.get('model_type', '?')} model ({', '.join(archs) or 'no architectures'}), "
                    "not a decoder: text is scored by next-token prediction; score a masked LM on shards "
                    "(evaluate --shards)")


def own_tokenizer(path: Path, location: str, extra: dict, what: str = ""):
    """The model's Hugging Face tokenizer, loaded without running code; a missing or unloadable one, or one with
    neither a bos nor an eos (``first_context``), is one line naming ``what`` (the flag that named the model:
    ``--model PATH`` unless given)."""
    from xpt_ds.data.tokenizer import check_vocabulary, model_tokenizer
    from xpt_ds.embedding_init.files import HF_TOKENIZER_FILES
    from xpt_ds.io.trust import first_file
    what = what or f"--model {path}"
    if not extra and first_file(location, HF_TOKENIZER_FILES) is None:
        raise UserError(f"{what} has no tokenizer files ({', '.join(HF_TOKENIZER_FILES[:3])}, ...); text is "
                        "scored in the model's own tokenizer")
    try:
        if extra:  # a .gguf file: its special tokens as the file states them
            from xpt_ds.io.gguf_tokenizer import load_gguf_tokenizer
            tokenizer = load_gguf_tokenizer(path)
        else:
            tokenizer = model_tokenizer(location, trust_remote_code=False)  # a Qwen2 export: the one it wrote
        check_vocabulary(tokenizer, path)
    except (OSError, ValueError, TypeError) as e:
        raise UserError(f"{what}: cannot load its tokenizer ({first_line(e)[:200]})") from None
    first_context(tokenizer, what)
    return tokenizer


def first_context(tokenizer, what: str = "") -> tuple[int, str]:
    """(the id every document is read after, what the JSON's ``first_token`` says): the tokenizer's bos, else its
    eos (module docstring); a tokenizer with neither is one line naming ``what`` (else the tokenizer's name)."""
    if tokenizer.bos_token_id is not None:
        return tokenizer.bos_token_id, f"predicted from bos {tokenizer.bos_token!r} (id {tokenizer.bos_token_id})"
    if tokenizer.eos_token_id is not None:
        return tokenizer.eos_token_id, (f"predicted from eos {tokenizer.eos_token!r} (id {tokenizer.eos_token_id}): "
                                        "the tokenizer has no bos")
    who = f"{what}: its tokenizer" if what else f"tokenizer {tokenizer.name_or_path}"
    raise UserError(f"{who} has neither a bos nor an eos token: nothing would predict a document's first piece, "
                    "whose bytes bits per byte counts; give the tokenizer one (tokenizer_config.json's bos_token)")


def max_positions(config) -> int | None:
    for key in ("xpt_max_length", "max_position_embeddings", "n_positions"):
        if isinstance(getattr(config, key, None), int):
            return getattr(config, key)
    return None


def read_documents(path: Path) -> list[str]:
    """The non-blank lines of a UTF-8 file, line ends removed; one line naming the file if it cannot be read."""
    if not path.is_file():
        raise UserError(f"--text {path}: no such file")
    docs = []
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                raise UserError(f"--text {path}: line {n} is not UTF-8 ({e.reason} at byte {e.start})") from None
            if line.strip():
                docs.append(line)
    if not docs:
        raise UserError(f"--text {path}: no text (every line is blank)")
    return docs


def windows(ids: list[int], seq_len: int) -> list[tuple[list[int], list[int]]]:
    """(inputs, targets) of one document's pieces ``ids`` (bos or eos first): targets are inputs shifted by one;
    at most ``seq_len`` each, every piece after the first a target once (module docstring)."""
    n = len(ids) - 1  # predictions
    return [(ids[k:min(k + seq_len, n)], ids[k + 1:min(k + seq_len, n) + 1]) for k in range(0, n, seq_len)]


@torch.no_grad()
def summed_nats(model, pairs: list[tuple[list[int], list[int]]], batch_size: int, device: str) -> float:
    """Sum of -log p(target | inputs so far) over every target of ``pairs``, in float64. Windows go longest
    first (ties by index: the same batches every run), right-padded, at most ``batch_size`` rows and
    ``BATCH_TOKENS`` padded pieces (one window always) per forward pass."""
    order = sorted(range(len(pairs)), key=lambda k: (-len(pairs[k][0]), k))
    total = torch.zeros((), dtype=torch.float64)
    start = 0
    while start < len(order) and len(pairs[order[start]][0]) > BATCH_TOKENS:
        total += _long_window_nats(model, *pairs[order[start]], device)
        start += 1
    while start < len(order):
        longest = len(pairs[order[start]][0])
        chunk = order[start:start + max(1, min(batch_size, BATCH_TOKENS // longest))]
        start += len(chunk)
        ids = torch.zeros(len(chunk), longest, dtype=torch.long)
        mask = torch.zeros_like(ids)
        targets = torch.full_like(ids, -100)
        for r, k in enumerate(chunk):
            inputs, out = pairs[k]
            ids[r, :len(inputs)] = torch.tensor(inputs)
            mask[r, :len(inputs)] = 1
            targets[r, :len(out)] = torch.tensor(out)
        logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits  # [B, T, vocab]
        total += _nats(logits, targets.to(device))  # ignore_index -100 positions are 0
    return float(total)


@torch.no_grad()
def _long_window_nats(model, inputs: list[int], targets: list[int], device: str) -> torch.Tensor:
    """``summed_nats`` of one window longer than ``BATCH_TOKENS`` pieces, ``BATCH_TOKENS`` positions a forward
    pass, each reading the positions before it from the key-value cache (module docstring)."""
    # transformers 5.24 names the cache ``cache`` (``past_key_values`` deprecated); earlier 5.x releases, such as
    # the GPU machines' 5.17, name it ``past_key_values``
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    part, past, total = BATCH_TOKENS, None, torch.zeros((), dtype=torch.float64)
    for at in range(0, len(inputs), part):
        ids = torch.tensor([inputs[at:at + part]], device=device)
        out = model(input_ids=ids, use_cache=True, **{name: past})
        past = getattr(out, name, None)
        if past is None:  # a model that keeps no cache (its own code): the whole window in one pass, as before
            ids = torch.tensor([inputs], device=device)
            logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
            return _nats(logits, torch.tensor([targets], device=device))
        total += _nats(out.logits, torch.tensor([targets[at:at + part]], device=device))
    return total


def _nats(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Summed next-piece cross-entropy of ``logits`` [B, T, vocab] against ``targets`` [B, T] (-100: none), in
    float32 over the [B, vocab, T] layout (over [T, vocab] PyTorch rounds otherwise: 3.9e-5 relative on SmolLM2's
    8,192 positions), summed in float64."""
    nll = torch.nn.functional.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none")
    return nll.double().sum().cpu()


def score_file(model, tokenizer, path: Path, seq_len: int, batch_size: int = 16, device: str = "cpu") -> dict:
    """The figures of one text file (module docstring)."""
    docs = read_documents(path)
    encoded = tokenizer(docs, add_special_tokens=False)["input_ids"]
    start, first = first_context(tokenizer)
    pieces = [[start] + ids for ids in encoded]
    pairs = [w for ids in pieces for w in windows(ids, seq_len)]
    nats = summed_nats(model, pairs, batch_size, device)
    tokens = sum(len(t) for _, t in pairs)
    n_bytes = sum(len(d.encode("utf-8")) for d in docs)
    words = sum(len(d.split()) for d in docs)
    n_pieces = sum(len(ids) for ids in encoded)
    return {"documents": len(docs), "windows": len(pairs), "pieces": n_pieces, "tokens": tokens, "bytes": n_bytes,
            "words": words, "nats": nats, "loss": nats / max(tokens, 1),
            "bits_per_byte": nats / math.log(2) / n_bytes, "pieces_per_word": n_pieces / max(words, 1),
            "first_token": first}
