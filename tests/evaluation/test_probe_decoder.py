"""``xpt-ds probe`` of a decoder run (``xpt_ds.evaluation.decoder_probe``): a tiny untied Llama and a tiny GPT-2
(tied head, learned positions), each with an English byte-level BPE tokenizer (bos and eos, no pad, as hub
decoders ship), are post-trained by XPT on the Korean corpus.
At the phase-1 boundary the reused layers, the final norm and GPT-2's positions are still the source's, so the
post-trained model
with the source's vocabulary and without its ITLs scores English exactly as the source does; with its ITLs, and
after phase 2 without them, it does not. A source whose layers are not the run's is one line."""
from __future__ import annotations

import contextlib
import json
import shutil

import numpy as np
import pytest
import torch

from conftest import base_config, launch, write_config
from xpt_ds.checkpoint.tags import tag_for
from xpt_ds.cli.evaluate import main as evaluate_main
from xpt_ds.cli.probe import main
from xpt_ds.config import ConfigError
from xpt_ds.evaluation.probe import probe

WORDS = ("the a of and to in is was for on with as by at from that this it be are or an were which city river house "
         "school music water world light stone garden winter summer north south old new small great early late "
         "people language history story").split()
SOURCE = "source model, source vocabulary"
WITH_ITLS, WITHOUT_ITLS = "post-trained, source vocabulary, with ITLs", "post-trained, source vocabulary, without ITLs"


def _english(path, lines: int, seed: int):
    rng = np.random.default_rng(seed)
    path.write_text("".join(" ".join(rng.choice(WORDS, rng.integers(3, 12))).capitalize() + ".\n"
                            for _ in range(lines)), encoding="utf-8")
    return path


def _source(out, text, family: str = "llama", layers: int = 2):
    """A byte-level BPE tokenizer of ``text`` (bos ``<s>``, eos ``</s>``, no pad; ``<extra_0>``, which keep_vocab's
    rows pad with) and an untied Llama or a tied GPT-2 over it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator(text.read_text().splitlines(), trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", "<s>", "</s>", "<extra_0>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    tok.save_pretrained(out)
    torch.manual_seed(5)
    ids = dict(vocab_size=len(tok), bos_token_id=1, eos_token_id=2)
    if family == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(n_embd=64, n_layer=layers, n_head=2, n_inner=128, n_positions=80, **ids))
    else:
        model = LlamaForCausalLM(LlamaConfig(hidden_size=64, num_hidden_layers=layers, num_attention_heads=2,
                                             num_key_value_heads=1, intermediate_size=128, max_position_embeddings=80,
                                             tie_word_embeddings=False, **ids))
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def xpt_run(request, tmp_path_factory, corpus):
    """(run directory, English test text, family): XPT from the English source, 2 + 2 steps, saved at both phase
    ends."""
    root = tmp_path_factory.mktemp("probe_decoder")
    source = _source(root / "source", _english(root / "train_en.txt", 400, seed=0), request.param)
    cfg = base_config(root / "run", source, corpus, checkpoint={"every_steps": 2},
                      phases=[{"name": "phase1", "steps": 2, "lr": 1e-3}, {"name": "phase2", "steps": 2, "lr": 5e-4}])
    cfg["logging"]["tensorboard"] = False
    proc = launch(["--config", str(write_config(root / "cfg.yaml", cfg))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "run", _english(root / "test_en.txt", 30, seed=1), request.param


def test_at_the_phase_boundary_the_layers_without_itls_are_the_source(xpt_run, tmp_path, corpus):
    run, text, _ = xpt_run
    out = tmp_path / "probe.json"
    assert main(["--run", str(run), "--tag", tag_for(2), "--source-text", str(text), "--out", str(out)]) == 0
    boundary = json.loads(out.read_text())
    rows = boundary["rows"]
    assert list(rows) == [SOURCE, WITH_ITLS, WITHOUT_ITLS] and boundary["tag"] == tag_for(2)
    assert "bits per byte" in boundary["scores"]
    assert rows[WITHOUT_ITLS] == rows[SOURCE]  # every figure, nats to the last bit
    assert rows[SOURCE]["tokens"] > 300 and rows[SOURCE]["first_token"].startswith("predicted from bos '<s>'")
    assert rows[WITH_ITLS]["nats"] != rows[SOURCE]["nats"]  # phase 1 trained the ITLs

    test = f"{corpus}/manifest.json:test"
    final = probe(run, text, target_shards=[test])["rows"]  # the newest checkpoint: phase 2 trained every layer
    assert final[SOURCE] == rows[SOURCE]
    with contextlib.redirect_stdout(None):  # the target text as evaluate scores the run's checkpoint
        assert evaluate_main(["--run", str(run), "--shards", test, "--out", str(tmp_path / "eval.json")]) == 0
    scored = json.loads((tmp_path / "eval.json").read_text())
    target = final["post-trained, target vocabulary (target text)"]
    assert target["tokens"] == scored["tokens"] and target["loss"] == pytest.approx(scored["loss"], rel=1e-6)
    assert final[WITHOUT_ITLS]["nats"] != rows[SOURCE]["nats"]
    assert final[WITH_ITLS]["nats"] != rows[WITH_ITLS]["nats"]


def test_a_source_whose_layers_are_not_the_runs_is_one_line(xpt_run, tmp_path):
    run, text, family = xpt_run
    other = _source(tmp_path / "deeper", text, family, layers=3)
    with pytest.raises(ConfigError) as e:
        probe(run, text, source_id=str(other))
    assert str(e.value) == (f"--source {other}: a {family} of 3 layers of width 64, but the run's reused layers are "
                            f"a {family}'s: 2 of width 64; give the run's own source")


def test_an_hf_config_of_another_model_is_one_line(xpt_run, tmp_path):
    """A tag's hf_config/config.json with a layer more than its weights (copied from another run): the decoder probe
    refuses it in one line, as export does, rather than fail on a missing value."""
    from xpt_ds.checkpoint.tags import CheckpointError
    run, text, _ = xpt_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    config = copy / "checkpoints" / tag_for(4) / "hf_config/config.json"
    saved = json.loads(config.read_text())
    layers = "n_layer" if "n_layer" in saved else "num_hidden_layers"  # GPT-2's name
    config.write_text(json.dumps({**saved, layers: saved[layers] + 1}))
    with pytest.raises(CheckpointError, match="its hf_config/config.json does not describe this checkpoint's "
                                              "weights: the checkpoint lacks"):
        probe(copy, text, source_id=str(run.parent / "source"))


def test_a_keep_vocab_run_is_also_scored_as_it_is(tmp_path, corpus_text):
    """Continued pretraining reads English as it is: its own row is its export's ``evaluate --text`` figure, and
    the row with the source's rows swapped back in isolates what the layers kept."""
    from data_tools.pipeline.run import run_pipeline
    from xpt_ds.cli.evaluate import main as evaluate_main
    from xpt_ds.cli.export import main as export_main
    source = _source(tmp_path / "source", _english(tmp_path / "train_en.txt", 400, seed=0))
    run_pipeline([corpus_text], tmp_path / "data", vocab_size=50, valid=0.1, test=0.1, seed=0, hf_tokenizer=str(source))
    cfg = base_config(tmp_path / "run", source, tmp_path / "data",
                      model={"source": str(source), "tokenizer": "", "method": "keep_vocab"},
                      phases=[{"name": "all", "steps": 2, "lr": 1e-3, "warmup_steps": 1}])
    cfg["logging"]["tensorboard"] = False
    proc = launch(["--config", str(write_config(tmp_path / "cfg.yaml", cfg))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = _english(tmp_path / "test_en.txt", 30, seed=1)
    rows = probe(tmp_path / "run", text)["rows"]
    swapped, own = "post-trained, the source's untrained rows swapped back in", "post-trained, its own vocabulary " \
        "and tokenizer"
    assert list(rows) == [SOURCE, swapped, own]
    assert export_main(["--run", str(tmp_path / "run"), "--out", str(tmp_path / "export")]) == 0
    assert evaluate_main(["--model", str(tmp_path / "export"), "--text", str(text), "--out",
                          str(tmp_path / "eval.json")]) == 0
    assert rows[own] == json.loads((tmp_path / "eval.json").read_text())["text"][str(text)]
    assert rows[own]["tokens"] == rows[SOURCE]["tokens"] == rows[swapped]["tokens"]
    assert len({rows[k]["nats"] for k in rows}) == 3  # the rows and the layers all trained


def test_the_swapped_model_reads_the_two_models_values_without_copying_them(tmp_path):
    """``with_source_vocabulary`` holds no third model: its embeddings and head are the source's tensors, its
    layers and final norm the post-trained model's (the 1B shape's probe peaked at 19.3 GB of host memory with
    copies, RESULTS.md); scoring it leaves both models as they were."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from xpt_ds.evaluation.decoder_probe import with_source_vocabulary
    from xpt_ds.evaluation.text_bpb import score_file
    text = _english(tmp_path / "en.txt", 20, seed=0)
    source = AutoModelForCausalLM.from_pretrained(_source(tmp_path / "source", text)).eval()
    post = AutoModelForCausalLM.from_pretrained(_source(tmp_path / "post", _english(tmp_path / "b.txt", 60, seed=1)))
    before = {k: v.clone() for k, v in [*post.state_dict().items(), *(("s." + k, v) for k, v in
                                                                      source.state_dict().items())]}
    swapped = with_source_vocabulary(post.eval(), source)
    got = dict(swapped.named_parameters())
    for name, p in post.named_parameters():
        owner = source if name in ("model.embed_tokens.weight", "lm_head.weight") else post
        assert got[name].data_ptr() == owner.get_parameter(name).data_ptr(), name
    score_file(swapped, AutoTokenizer.from_pretrained(tmp_path / "source"), text, 64)
    after = {k: v for k, v in [*post.state_dict().items(), *(("s." + k, v) for k, v in source.state_dict().items())]}
    assert all(torch.equal(before[k], after[k]) for k in before)
