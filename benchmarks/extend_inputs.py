"""The inputs of ``bench_build.py --method extend``: a source tokenizer of Llama 3's size and layout, the tokenizer
``xpt-data extend-vocab`` makes from it, and UA-GEC's text prepared in its ids.

The random-weight sources carry no tokenizer, and Llama 3's own is not on PyPI. ``write_llama3_tokenizer`` trains one
of the same kind and size with ``tokenizers``: Llama 3's split regex, then byte-level BPE without a regex of its
own, 128,000 BPE entries (the 256 bytes among them), then 256 special tokens at ids 128,000..128,255
(``<|begin_of_text|>``, ``<|end_of_text|>``, reserved ones), no pad; trained on the first ``text_bytes`` bytes of the
UTF-8 Python sources under this interpreter's site-packages, in path order (the same files give the same merges).
It has Llama 3's shape, not its merges: English prose is cut into more pieces than Llama 3 cuts it.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENGLISH = Path("/usr/share/common-licenses/GPL-3")  # extend-vocab's --english check (Debian's copy of the GPL)
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
BPE_ENTRIES, SPECIALS = 128_000, 256
BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"


def python_sources(text_bytes: int) -> list[str]:
    """The site-packages .py files, in path order, that decode as UTF-8, until ``text_bytes`` bytes."""
    files, total = [], 0
    for path in sorted(Path(sys.prefix, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}",
                            "site-packages").rglob("*.py")):
        try:
            data = path.read_bytes()
            data.decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        files.append(str(path))
        total += len(data)
        if total >= text_bytes:
            break
    return files


def write_llama3_tokenizer(out: Path, text_bytes: int = 150_000_000) -> dict:
    """``tokenizer.json`` and ``tokenizer_config.json`` of a 128,256-entry Llama-3-layout tokenizer in ``out`` (kept
    when there); returns what was trained on and how long it took."""
    if (out / "tokenizer.json").is_file():
        return {"kept": str(out / "tokenizer.json")}
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    files = python_sources(text_bytes)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_SPLIT), "isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    started = time.perf_counter()
    tok.train(files, trainers.BpeTrainer(vocab_size=BPE_ENTRIES, min_frequency=2, show_progress=False,
                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    seconds = time.perf_counter() - started
    learned = tok.get_vocab_size()
    # fewer entries than asked (too little text): unused specials keep the special tokens at Llama 3's ids
    tok.add_special_tokens([f"<|unused_{i}|>" for i in range(BPE_ENTRIES - learned)] + [BOS, EOS] +
                           [f"<|reserved_special_token_{i}|>" for i in range(SPECIALS - 2)])
    assert tok.get_vocab_size() == BPE_ENTRIES + SPECIALS and tok.token_to_id(BOS) == BPE_ENTRIES
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A $B",
                                                       special_tokens=[(BOS, BPE_ENTRIES)])
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS,
         "model_max_length": 131072}, indent=1) + "\n")
    return {"files": len(files), "learned": learned, "train_s": round(seconds, 1)}


def extended_inputs(work: Path, source: Path, uagec_text: Path, add: int = 8000) -> tuple[Path, Path, dict]:
    """``xpt-data extend-vocab --source SOURCE --add ADD`` on UA-GEC's train text (timed), then that text prepared
    in the extended tokenizer's ids: (the tokenizer, the corpus, what the extension took)."""
    tok, data = work / "tok_ext", work / "uk_ext"
    facts: dict = {}
    if not (tok / "extend_vocab.json").is_file():
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "data_tools.cli.extend_vocab", "--source", str(source), "--text",
                        str(uagec_text), "--out", str(tok), "--add", str(add), "--english", str(ENGLISH)],
                       cwd=REPO, check=True, capture_output=True)
        facts["extend_vocab_s"] = round(time.perf_counter() - started, 1)
    report = json.loads((tok / "extend_vocab.json").read_text())
    facts.update(source_size=report["source_size"], added=report["added"], size=report["size"])
    if not (data / "manifest.json").is_file():
        subprocess.run([sys.executable, "-m", "data_tools.cli.prepare", "--input", str(uagec_text), "--out",
                        str(data), "--hf-tokenizer", str(tok), "--valid", "0.02", "--test", "0.02"], cwd=REPO,
                       check=True, capture_output=True)
    return tok, data, facts
