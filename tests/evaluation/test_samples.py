"""xpt_ds.evaluation.samples: a decoder's sampled continuations in the evaluation report. Prompts are the
openings of the held-out documents, the samples repeat for the same seed, and ``xpt-ds evaluate`` writes them
for a decoder (not for the unigram baseline)."""
import json
from pathlib import Path

import numpy as np
import sentencepiece as spm

from xpt_ds.config import ModelConfig
from xpt_ds.data.manifest import expand_shards
from xpt_ds.data.shards import DocReader, scan_shards
from xpt_ds.data.tokenizer import build_tokenizer
from xpt_ds.cli.evaluate import main as evaluate_main
from xpt_ds.evaluation.samples import held_out_prompts, sample_continuations
from xpt_ds.model.build import build_model


def test_prompts_are_document_openings_and_samples_repeat(tiny_decoder, corpus, tmp_path):
    tok = build_tokenizer(str(corpus / "spm.model"))
    shards = [f"{corpus}/manifest.json:test"]
    prompts = held_out_prompts(shards, tok, count=5, prompt_pieces=8)
    indexes, _ = scan_shards(expand_shards(shards, tok), "fail", vocab=(tok.vocab_size, tok.path))
    docs = [DocReader(indexes).read(0, d) for d in range(len(indexes[0].lengths))]
    want = [d[:8].tolist() for d in docs if len(d) >= 8][:5]
    assert prompts == want and 0 < len(prompts) <= 5

    cfg = ModelConfig(source=str(tiny_decoder("llama", False)), tokenizer=tok.path, method="xpt")
    model = build_model(cfg, tok).model
    first = sample_continuations(model, tok, prompts, new_pieces=6, seed=3)
    again = sample_continuations(model, tok, prompts, new_pieces=6, seed=3)
    other = sample_continuations(model, tok, prompts, new_pieces=6, seed=4)
    sp = spm.SentencePieceProcessor(model_file=tok.path)
    assert first == again and first != other
    assert [s["prompt"] for s in first] == [sp.decode(p) for p in prompts]
    assert all(isinstance(s["continuation"], str) and s["continuation"] for s in first)

    # The CLI: samples in the report of a decoder export; none for the unigram baseline.
    out = tmp_path / "model"
    model.save_pretrained(out)
    (out / "spm.model").write_bytes(Path(tok.path).read_bytes())
    assert evaluate_main(["--model", str(out), "--shards", *shards, "--seq-len", "32", "--samples", "2",
                          "--out", str(tmp_path / "m.json")]) == 0
    report = json.loads((tmp_path / "m.json").read_text())
    assert [s["prompt"] for s in report["samples"]] == [sp.decode(p) for p in prompts[:2]]
    assert evaluate_main(["--model", str(out), "--shards", *shards, "--seq-len", "32", "--unigram",
                          f"{corpus}/manifest.json:train", "--out", str(tmp_path / "u.json")]) == 0
    assert "samples" not in json.loads((tmp_path / "u.json").read_text())
    assert np.isfinite(report["bits_per_byte"])
