"""A decoder source with a SentencePiece model of the user's own that has no mask piece (SentencePiece's defaults
plus a pad, as a Llama-style tokenizer is): `prepare --tokenizer` tokenizes the corpus with it, both phases
train, the checkpoint and the export score the test split alike, and stock ``AutoTokenizer`` loads the export's
tokenizer without a mask token. Until 2026-12-06 the trainer refused such a model for every source ("has no mask
piece") and refused ``model.mask_token`` for a decoder: a decoder user had to train another vocabulary. One rank,
forked from the test process (``processes.run_main``)."""
import json

import sentencepiece as spm
from conftest import REPO, base_config, launch, one_error_line_of, write_config
from test_given_tokenizer import own_spm
from transformers import AutoModelForCausalLM, AutoTokenizer

from data_tools.pipeline.run import run_pipeline
from xpt_ds.cli.evaluate import main as evaluate_main
from xpt_ds.cli.export import main as export_main


def test_a_decoder_trains_and_exports_with_a_model_without_a_mask_piece(tmp_path, tiny_decoder, tiny_roberta,
                                                                         corpus_text):
    model = own_spm(corpus_text, tmp_path / "own", pad_id=3)
    sp = spm.SentencePieceProcessor(model_file=str(model))
    assert all(sp.piece_to_id(p) == sp.unk_id() for p in ("<mask>", "[MASK]")) and sp.pad_id() == 3
    data = run_pipeline([corpus_text], tmp_path / "data", tokenizer=str(model), valid=0.1, test=0.1)["manifest"]
    cfg = base_config(tmp_path / "run", tiny_decoder("llama", False), tmp_path / "data",
                      deepspeed=str(REPO / "ds_configs/zero1_fp32.json"))
    cfg["model"]["tokenizer"] = str(model)
    cfg["phases"] = [{**p, "steps": 2} for p in cfg["phases"]]
    cfg["logging"].update(tensorboard=False)
    proc = launch(["--config", str(write_config(tmp_path / "cfg.yaml", cfg))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert export_main(["--run", str(tmp_path / "run"), "--out", str(tmp_path / "model")]) == 0

    tok = AutoTokenizer.from_pretrained(tmp_path / "model")
    assert tok.mask_token is None and (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (3, 1, 2)
    text = " ".join(sp.id_to_piece(i).lstrip("▁") for i in (40, 60, 80))
    enc = tok(text, return_tensors="pt")
    assert enc["input_ids"][0].tolist() == [sp.bos_id(), *sp.encode(text)]
    out = AutoModelForCausalLM.from_pretrained(tmp_path / "model").generate(**enc, max_new_tokens=3,
                                                                            do_sample=False, pad_token_id=3)
    assert out.shape[1] == enc["input_ids"].shape[1] + 3

    scores = {}
    for name, args in (("export", ["--model", str(tmp_path / "model")]), ("run", ["--run", str(tmp_path / "run")])):
        assert evaluate_main([*args, "--shards", f"{data}:test", "--out", str(tmp_path / f"{name}.json")]) == 0
        scores[name] = json.loads((tmp_path / f"{name}.json").read_text())
    assert scores["export"]["objective"] == "next_token" and scores["export"]["tokens"] > 0
    assert scores["export"]["loss"] == scores["run"]["loss"]

    # An encoder's masked LM needs the mask piece: one line naming the key and what to do.
    cfg = base_config(tmp_path / "enc", tiny_roberta, tmp_path / "data")
    cfg["model"]["tokenizer"] = str(model)
    proc = launch(["--config", str(write_config(tmp_path / "enc.yaml", cfg))])
    one_error_line_of(proc, "config key 'model.tokenizer'", "has no mask piece", "model.mask_token names another")
