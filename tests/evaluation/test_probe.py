"""The source-language probe: swapping the source vocabulary back into a model that reused the source
unchanged gives back the source model exactly (embeddings, tied decoder, head bias, pad id and shifted
position rows, ITL removal); the CLI scores every row on a trained run."""
import json
import shutil

import numpy as np
import pytest
import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer

from conftest import TINY, base_config, launch, run_main, write_config
from xpt_ds.config import DataConfig, ModelConfig
from xpt_ds.model.build import build_model
from xpt_ds.evaluation.probe import source_batches, swap_in_source_vocabulary
from xpt_ds.data.tokenizer import build_tokenizer

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


@pytest.fixture(scope="module")
def source(tmp_path_factory, tiny_roberta):
    """The tiny RoBERTa source plus a word-level "English" tokenizer over its 120 ids, and some text."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    out = tmp_path_factory.mktemp("tiny_source_with_tokenizer")
    shutil.copytree(tiny_roberta, out, dirs_exist_ok=True)
    vocab = {t: i for i, t in enumerate(SPECIALS + [f"w{i}" for i in range(len(SPECIALS), TINY["vocab_size"])])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", cls_token="<s>",
                            sep_token="</s>", pad_token="<pad>", unk_token="<unk>",
                            mask_token="<mask>").save_pretrained(out)
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in rng.integers(len(SPECIALS), TINY["vocab_size"], 600)]
    (out / "text.txt").write_text("\n".join(" ".join(words[i:i + 12]) for i in range(0, 600, 12)))
    return out


@pytest.mark.parametrize("method,keep_itl", [("xpt_no_itl", True), ("xpt", False)])
def test_swapping_back_an_unchanged_model_gives_the_source(source, corpus_bert, method, keep_itl):
    """corpus_bert's tokenizer has pad 0 against the source's 1: the position rows were shifted and must
    be shifted back."""
    tok = build_tokenizer(str(corpus_bert / "spm.model"))
    post = build_model(ModelConfig(source=str(source), tokenizer=tok.path, method=method), tok).model
    swapped = swap_in_source_vocabulary(post, AutoModelForMaskedLM.from_pretrained(source), keep_itl=keep_itl).eval()
    src = AutoModelForMaskedLM.from_pretrained(source).eval()
    tokenizer = AutoTokenizer.from_pretrained(source)
    batch = next(source_batches(source / "text.txt", tokenizer, 32, 4, 0, DataConfig()))
    with torch.no_grad():
        a = src(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        b = swapped(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    torch.testing.assert_close(b, a, rtol=0, atol=1e-5)


def test_probe_cli_scores_every_row(tmp_path, source, corpus):
    run = tmp_path / "run"
    proc = launch(["--config", str(write_config(tmp_path / "c.yaml", base_config(run, source, corpus)))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = run_main("xpt_ds.cli.probe", ["--run", str(run), "--source-text", str(source / "text.txt"),
                                    "--target-shards", f"{corpus}/manifest.json:valid", "--seq-len", "32"])
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    rows = result["rows"]
    assert (result["seq_len"], result["target_seq_len"]) == (32, 32)  # --seq-len; the run's data.seq_len
    assert list(rows) == ["source model, source vocabulary", "post-trained, source vocabulary, with ITLs",
                          "post-trained, source vocabulary, without ITLs",
                          "post-trained, target vocabulary (target text)"]
    assert all(r["tokens"] > 0 and r["ppl"] > 1 for r in rows.values())
    n = rows["source model, source vocabulary"]["tokens"]
    assert rows["post-trained, source vocabulary, with ITLs"]["tokens"] == n  # the same masked tokens

    bad = run_main("xpt_ds.cli.probe", ["--run", str(run), "--source-text", str(tmp_path / "missing.txt")])
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1] == \
        f"error: --source-text {tmp_path / 'missing.txt'} not found"


def test_probe_names_a_missing_target_split_before_it_reads_the_checkpoint(tmp_path, source, corpus, monkeypatch,
                                                                           capsys):
    """Was said after both models had loaded and the source text was scored three times."""
    import xpt_ds.export.hf
    from xpt_ds.cli.probe import main

    def read(*args):
        raise AssertionError("the checkpoint was read")
    monkeypatch.setattr(xpt_ds.export.hf, "checkpoint_config", read)
    argv = ["--run", str(tmp_path), "--source-text", str(source / "text.txt"),
            "--target-shards", f"{corpus}/manifest.json:tset"]
    assert main(argv) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        f"error: manifest {corpus}/manifest.json has no split 'tset' (has train, valid, test)"
