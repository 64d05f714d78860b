"""Fine-tuning's checks and its --out folder, fast: CSV/TSV rows against their header, flags that need other flags
or labels, a GPT-2's position limit (``n_positions``), a decoder row that ends in the token batches are padded
with, and what an interrupted run leaves in ``--out`` (the model and the seeds faked)."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from finetune_builders import byte_level_tokenizer, write_jsonl
from xpt_ds.cli.finetune import main
from xpt_ds.finetuning import run as ft_run
from xpt_ds.finetuning.config import FinetuneConfig
from xpt_ds.finetuning.data import Encoded, collate

WORDS = ["cat", "dog", "bird", "fish", "red", "blue", "green", "big", "small", "runs", "sits", "eats", "the", "a",
         "john", "mary", "paris"]
POSITIONS = 16  # the tiny GPT-2's n_positions


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_thread):
    """Tiny models in-process: one intra-op thread (conftest.one_thread)."""


def _error(argv: list[str], tmp: Path, capsys) -> str:
    """The one error line of a run that stops before loading its (missing) model; no --out left behind."""
    assert main(["--model", str(tmp / "no_model"), "--out", str(tmp / "o"), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert not (tmp / "o").exists()
    return err[0]


def test_a_csv_or_tsv_row_that_does_not_match_its_header_is_refused(tmp_path, capsys):
    good = write_jsonl(tmp_path / "good.jsonl", [{"text": "x", "label": "no"}, {"text": "y", "label": "yes"}])
    rows = "".join(f"the cat {i},{'yes' if i % 2 else 'no'}\n" for i in range(4))
    cases = {  # file, its text -> the error's end
        "extra.csv": ("text,label\n" + rows + "the cat, the dog runs,yes\n", "extra.csv line 6: 3 fields but the "
                                                                           "header has 2"),
        "extra.tsv": ("text\tlabel\n" + rows.replace(",", "\t") + "a\tb\tyes\n",
                      "extra.tsv line 6: 3 fields but the header has 2"),
        "short.csv": ("text,label,source\n" + rows.replace("\n", ",web\n") + "the dog,no\n",
                      "short.csv line 6: 2 fields but the header has 3"),
        "twice.csv": ("text,label,label\n" + rows.replace("\n", ",no\n"),
                      "twice.csv line 1 (the header): column 'label' occurs 2 times"),
    }
    for name, (text, needle) in cases.items():
        (tmp_path / name).write_text(text)
        err = _error(["--train", str(tmp_path / name), "--test", str(good)], tmp_path, capsys)
        assert err.endswith(needle), (name, err)
    # Blank lines, before the header too, are skipped as before; a repeated column the task does not read is left be.
    (tmp_path / "fine.csv").write_text("\ntext,label,id,id\n\n" + rows.replace("\n", ",1,2\n") + "\n")
    from xpt_ds.finetuning.data import Columns, read_examples
    examples = read_examples(tmp_path / "fine.csv", "--train", "classification", Columns())
    assert [(ex.where, ex.text, ex.label) for ex in examples[:2]] == [
        (f"{tmp_path / 'fine.csv'} line 4", "the cat 0", "no"), (f"{tmp_path / 'fine.csv'} line 5", "the cat 1", "yes")]
    assert len(examples) == 4


def test_binary_f1_needs_two_labels_and_patience_needs_valid(tmp_path, capsys):
    three = write_jsonl(tmp_path / "three.jsonl", [{"text": f"w{i}", "label": "abc"[i % 3]} for i in range(6)])
    err = _error(["--train", str(three), "--test", str(three), "--metric", "binary_f1"], tmp_path, capsys)
    assert err == (f"error: --metric binary_f1 needs two labels, and --train {three} has 3 (a, b, c); use macro_f1 "
                   "or accuracy")
    err = _error(["--train", str(three), "--test", str(three), "--patience", "2"], tmp_path, capsys)
    assert err == "error: --patience 2 needs --valid: it stops after that many epochs without a better validation score"


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory) -> Path:
    """A tiny stock GPT-2 of 16 positions (``n_positions``, no ``max_position_embeddings``) whose byte-level BPE
    tokenizer has bos <s> (id 0) and eos </s> (id 1) and no pad token."""
    from transformers import GPT2Config, GPT2LMHeadModel
    out = tmp_path_factory.mktemp("gpt2")
    rng = random.Random(0)
    tok = byte_level_tokenizer([" ".join(rng.choice(WORDS) for _ in range(8)) for _ in range(300)])
    tok.save_pretrained(out)
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=1, n_head=2, n_inner=64, n_positions=POSITIONS,
                               bos_token_id=0, eos_token_id=1)).save_pretrained(out)
    return out


def _sentences(n: int, length: int = 3, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [{"text": " ".join(rng.choice(WORDS) for _ in range(length)), "label": "yes" if i % 2 else "no"}
            for i in range(n)]


def test_a_gpt2s_n_positions_caps_the_rows_of_sentences_and_relations(gpt2, tmp_path):
    """GPT-2 states its positions as ``n_positions``: a 60-word test row is cut to them (it was not, and the
    position embedding raised IndexError), and so are relation rows."""
    train = write_jsonl(tmp_path / "train.jsonl", _sentences(8))
    test = write_jsonl(tmp_path / "test.jsonl", _sentences(1, length=60) + _sentences(3))
    cfg = FinetuneConfig(model=str(gpt2), train=str(train), test=str(test), out=str(tmp_path / "o"))
    prep = ft_run.prepare(cfg)
    assert prep.max_length == POSITIONS
    assert [len(f["input_ids"]) for f in prep.splits["test"].encoded.features][0] == POSITIONS
    model = ft_run.build_model(cfg, prep)
    assert len(ft_run.predict(model, prep.splits["test"], "classification", prep.pad_id, 4, torch.device("cpu"))) == 4

    def record(words: list[str], label: str) -> dict:
        sentence = " ".join(words)
        ents = [{"word": w, "start_idx": sentence.index(w), "end_idx": sentence.index(w) + len(w) - 1, "type": t}
                for w, t in (("john", "PER"), ("paris", "LOC"))]
        return {"sentence": sentence, "subject_entity": ents[0], "object_entity": ents[1], "label": label}
    rows = [record(["the", "cat"] * 10 + ["john", "sits", "paris"] + ["a", "dog"] * 10, "lives_in" if i % 2 else
                   "no_relation") for i in range(4)]
    files = {k: str(write_jsonl(tmp_path / f"re_{k}.jsonl", rows)) for k in ("train", "test")}
    prep = ft_run.prepare(FinetuneConfig(model=str(gpt2), task="relation", out=str(tmp_path / "o"), **files))
    assert prep.max_length == POSITIONS
    assert {len(f["input_ids"]) for f in prep.splits["test"].encoded.features} == {POSITIONS}


def test_a_saved_gpt2_classifier_pads_on_the_right_for_stock_inference(gpt2, tmp_path):
    """A decoder export's tokenizer pads on the left, for generation. GPT-2 learns absolute positions, so a stock
    forward of a left-padded row reads its pieces at other positions: the classifier ``--save-model`` saved from
    such an export predicted otherwise in a padded batch than each row alone (until 2026-12-04). Its tokenizer
    now pads on the right, as fine-tuning's own batches do."""
    import shutil

    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    source = tmp_path / "export"
    shutil.copytree(gpt2, source)
    config = json.loads((source / "tokenizer_config.json").read_text())
    (source / "tokenizer_config.json").write_text(json.dumps({**config, "padding_side": "left"}))
    rows = _sentences(8) + _sentences(8, length=6, seed=1)
    files = {k: str(write_jsonl(tmp_path / f"{k}.jsonl", rows)) for k in ("train", "test")}
    cfg = FinetuneConfig(model=str(source), out=str(tmp_path / "o"), seeds=[1], epochs=1, save_model=True, **files)
    ft_run.finetune(cfg)
    saved = tmp_path / "o" / "model"
    tok, model = AutoTokenizer.from_pretrained(saved), AutoModelForSequenceClassification.from_pretrained(saved)
    assert tok.padding_side == "right" and AutoTokenizer.from_pretrained(source).padding_side == "left"
    texts = [r["text"] for r in rows]
    with torch.no_grad():
        batched = model(**tok(texts, padding=True, return_tensors="pt")).logits
        alone = torch.cat([model(**tok([t], return_tensors="pt")).logits for t in texts])
    torch.testing.assert_close(batched, alone, atol=1e-5, rtol=1e-5)


def test_a_decoder_row_ending_in_the_eos_token_is_read_there(gpt2, tmp_path):
    """The tokenizer has no pad token, so batches would be padded with eos, and the sequence head, which reads a
    row's rightmost piece that is not the pad id, would read a row whose text ends in </s> at the piece before
    (the same logits as without it). Another special token (<s>) pads instead, in the config and tokenizer too."""
    rows = [{**r, "text": r["text"] + "</s>"} for r in _sentences(4)] + _sentences(5, length=5, seed=1)
    files = {k: str(write_jsonl(tmp_path / f"{k}.jsonl", rows)) for k in ("train", "test")}
    cfg = FinetuneConfig(model=str(gpt2), out=str(tmp_path / "o"), **files)
    prep = ft_run.prepare(cfg)
    model = ft_run.build_model(cfg, prep).eval()
    feats = prep.splits["test"].encoded.features
    with_eos, longer = feats[0], max(feats, key=lambda f: len(f["input_ids"]))
    assert with_eos["input_ids"][-1] == 1 and len(longer["input_ids"]) > len(with_eos["input_ids"])
    without = {**with_eos, "input_ids": with_eos["input_ids"][:-1], "attention_mask": with_eos["attention_mask"][:-1]}

    def logits(features: list[dict]) -> torch.Tensor:
        batch = collate(features, prep.pad_id)
        batch.pop("labels")
        with torch.no_grad():
            return model(**batch).logits
    padded = logits([with_eos, longer])[0]  # padded to the longer row's length
    assert torch.allclose(padded, logits([with_eos])[0], atol=1e-6)
    assert not torch.allclose(padded, logits([without])[0], atol=1e-4)  # the eos position, not the one before
    assert prep.pad_id == model.config.pad_token_id == 0 and prep.tokenizer.pad_token == "<s>"


def _fake_run(monkeypatch, interrupt_at: int | None):
    """``prepare`` and ``run_seed`` faked: each seed scores 0.5, the first saves a model where it is told to, and
    seed ``interrupt_at`` is interrupted (Ctrl-C) after that."""
    prep = ft_run.Prepared([], {n: ft_run.Split(Encoded([], []), [1.0, 2.0]) for n in ("train", "test")}, None,
                           False, 8, {}, 0, False)
    monkeypatch.setattr(ft_run, "prepare", lambda cfg: prep)

    def run_seed(cfg, prep, seed, device, save=None):
        if save is True:  # as the code before 2026-12-02 called it
            save = Path(cfg.out) / "model"
        if save:
            save.mkdir()
            (save / "config.json").write_text(f'{{"seed": {seed}}}')
        if seed == interrupt_at:
            raise KeyboardInterrupt
        return {"seed": seed, "epoch": 1, "test": {"spearman": 0.5}, "history": []}
    monkeypatch.setattr(ft_run, "run_seed", run_seed)


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


INTERRUPTED = dict(model="m", train="t", test="t", task="regression", seeds=[1, 2], save_model=True)


def test_an_interrupted_run_removes_the_out_it_made(tmp_path, monkeypatch):
    """Ctrl-C in seed 2, after seed 1 saved its model (--save-model): the --out the run made is gone, and so are
    the folders it made above it."""
    _fake_run(monkeypatch, interrupt_at=2)
    out = tmp_path / "made" / "out"
    with pytest.raises(KeyboardInterrupt):
        ft_run.finetune(FinetuneConfig(out=str(out), **INTERRUPTED))
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_an_interrupted_run_leaves_an_earlier_out_as_it_was(tmp_path, monkeypatch):
    """The same in an --out that was there before: it holds what it held, the earlier results and model in place
    (not moved to results.1.json and model.1), and no model of this run."""
    _fake_run(monkeypatch, interrupt_at=2)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "results.json").write_text('{"seeds": []}')
    (tmp_path / "notes.txt").write_text("mine")
    before = _tree(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        ft_run.finetune(FinetuneConfig(out=str(tmp_path), **INTERRUPTED))
    assert _tree(tmp_path) == before and sorted(p.name for p in tmp_path.iterdir()) == ["model", "notes.txt",
                                                                                        "results.json"]


def test_a_finished_run_moves_the_earlier_results_and_models_aside(tmp_path, monkeypatch, capsys):
    """The saved model reaches model/ with results.json; an earlier results.json and its model move to
    results.1.json and model.1, and a model/ no results.json describes to model.2."""
    _fake_run(monkeypatch, interrupt_at=None)
    cfg = INTERRUPTED
    res = ft_run.finetune(FinetuneConfig(out=str(tmp_path), **cfg))
    assert res["saved_model"] == str(tmp_path / "model")
    assert _tree(tmp_path) == {"model/config.json": '{"seed": 1}', "results.json": (tmp_path / "results.json")
                               .read_text()}
    ft_run.finetune(FinetuneConfig(out=str(tmp_path), **cfg))
    assert json.loads((tmp_path / "results.1.json").read_text())["saved_model"] == str(tmp_path / "model.1")
    (tmp_path / "results.json").unlink()  # model/ left alone, as a failed run before 2026-12-02 left it
    ft_run.finetune(FinetuneConfig(out=str(tmp_path), **cfg))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "model.1", "model.2", "results.1.json",
                                                          "results.json"]
    assert "kept the earlier " + str(tmp_path / "model") + ", which no results.json describes, as model.2" in (
        capsys.readouterr().err)


def test_a_damaged_earlier_results_file_is_kept_as_it_is_and_the_run_finishes(tmp_path, monkeypatch, capsys):
    """An earlier results.json cut short (or not a JSON object) beside its model/: the new run's results and model
    are written, the earlier file and model move aside unchanged. Before, the run's end was a JSONDecodeError
    traceback, its results were lost and the earlier model/ had been renamed away from its results.json."""
    _fake_run(monkeypatch, interrupt_at=None)
    (tmp_path / "model").mkdir()
    for n, damaged in enumerate(('{"seeds": [1', "[1, 2]"), start=1):  # cut short; then over the first run's own
        (tmp_path / "results.json").write_text(damaged)
        res = ft_run.finetune(FinetuneConfig(out=str(tmp_path), **INTERRUPTED))
        assert res["saved_model"] == str(tmp_path / "model") and (tmp_path / "model/config.json").is_file()
        assert (tmp_path / f"results.{n}.json").read_text() == damaged and (tmp_path / f"model.{n}").is_dir()
        assert json.loads((tmp_path / "results.json").read_text())["saved_model"] == str(tmp_path / "model")
        assert (f"as results.{n}.json (its model as model.{n}); it is not a JSON object, so its saved_model does "
                f"not name model.{n}") in capsys.readouterr().err
