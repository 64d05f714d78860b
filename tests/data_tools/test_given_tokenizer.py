"""`prepare --tokenizer MODEL` (a SentencePiece model of the user's own) and `--hf-tokenizer`: checked before the
clean stage reads the corpus, for what training with them needs, and held to the trainer's own answer
(``xpt_ds.data.tokenizer.tokenizer_for``) on the same models; `xpt-data spm-specials`, which adds the pad or mask
piece such a model lacks."""
from __future__ import annotations

import contextlib
import io
from pathlib import Path
from types import SimpleNamespace

import pytest
import sentencepiece as spm

from conftest import write_synthetic_corpus
from data_tools.cli.prepare import main as prepare_main
from data_tools.errors import PrepareError
from data_tools.pipeline.run import run_pipeline
from data_tools.pipeline.spm.given import given_tokenizer


def own_spm(text: Path, prefix: Path, **options) -> Path:
    """A SentencePiece model trained on ``text`` with SentencePiece's own defaults (unk 0, bos 1, eos 2, no pad, no
    mask piece: what a Llama-style tokenizer is) but for ``options`` (and a vocabulary of 200 pieces)."""
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(prefix), minloglevel=2,
                                   **{"vocab_size": 200, **options})
    return prefix.with_suffix(".model")


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    return write_synthetic_corpus(tmp_path_factory.mktemp("given") / "corpus.txt", docs=40, seed=5)


@pytest.fixture(scope="module")
def models(text, tmp_path_factory):
    """name -> a model: SentencePiece's defaults; a pad id but no mask piece; neither bos nor eos; a pad and a mask;
    the whitespace marker as a suffix (no export's tokenizer encodes alike); prepare's own."""
    d = tmp_path_factory.mktemp("models")
    made = {"defaults": own_spm(text, d / "defaults"), "pad": own_spm(text, d / "pad", pad_id=3),
            "no_bos_eos": own_spm(text, d / "no_bos_eos", pad_id=1, bos_id=-1, eos_id=-1),
            "mask": own_spm(text, d / "mask", pad_id=3, user_defined_symbols=["<mask>"]),
            "suffix": own_spm(text, d / "suffix", pad_id=3, user_defined_symbols=["<mask>"],
                              treat_whitespace_as_suffix=True)}
    run_pipeline([text], d / "prepared", vocab_size=200, valid=0, test=0)
    made["prepared"] = d / "prepared/spm.model"
    return made


def _prepare(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = prepare_main(argv)
        except SystemExit as e:  # its refusals exit 2
            code = e.code
    return code, err.getvalue()


def test_a_given_model_without_a_pad_is_one_line_before_the_corpus_is_read(text, models, tmp_path):
    """SentencePiece's defaults have no pad (pad_id -1): the model was copied and the corpus cleaned, split and
    tokenized with it, and only then did the trainer refuse it ("lacks pad id(s)"). Now prepare says so first, and
    writes nothing; a file that is not a model, and a missing --hf-tokenizer or one without tokenizer files, are
    said first too (they were said after the clean and split stages), and so is the one of the two flags too many
    (--tokenizer was ignored)."""
    bogus = tmp_path / "bogus.model"
    bogus.write_text("not a model\n")
    weights_only = tmp_path / "model"  # a model directory without its tokenizer: transformers' line named no file
    weights_only.mkdir()
    (weights_only / "config.json").write_text("{}")
    cases = [(["--tokenizer", str(models["defaults"])],
              [f"--tokenizer {models['defaults']} has no pad piece (pad_id -1)", "spm_train --pad_id"]),
             (["--tokenizer", str(models["no_bos_eos"])], ["has no bos or eos piece (bos_id, eos_id -1)"]),
             (["--tokenizer", str(bogus)], [f"{bogus}: not a SentencePiece model ("]),
             (["--tokenizer", str(models["suffix"])], ["export could not write it", "(treat_whitespace_as_suffix)"]),
             (["--hf-tokenizer", str(tmp_path / "nowhere")], ["tokenizer directory not found"]),
             (["--hf-tokenizer", str(weights_only)],
              [f"{weights_only} holds no tokenizer files (no Hugging Face tokenizer: none of tokenizer.json, "]),
             (["--tokenizer", str(models["pad"]), "--hf-tokenizer", str(weights_only)],
              ["--tokenizer and --hf-tokenizer are both given"])]
    for flags, needles in cases:
        out = tmp_path / "out"
        code, err = _prepare(["--input", str(text), "--out", str(out), "--quiet", *flags])
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert code == 2 and len(errors) == 1 and all(n in errors[0] for n in needles), err
        assert not out.exists(), flags  # nothing read, nothing written


def test_a_given_model_without_a_mask_piece_is_taken_and_said(text, models, tmp_path):
    """A decoder masks nothing: a model with pad, bos, eos and unk but no mask piece tokenizes the corpus, and the
    log says what an encoder source would need."""
    code, err = _prepare(["--input", str(text), "--out", str(tmp_path / "out"), "--tokenizer", str(models["pad"])])
    assert code == 0, err
    assert "has no <mask> or [MASK] piece: a decoder source needs none" in err
    assert (tmp_path / "out/spm.model").read_bytes() == models["pad"].read_bytes()
    code, err = _prepare(["--input", str(text), "--out", str(tmp_path / "out2"), "--tokenizer", str(models["mask"])])
    assert code == 0 and "<mask>" not in err, err


def test_prepare_and_the_trainer_take_and_refuse_the_same_models(models):
    """Each model that prepare refuses the trainer refuses too, for a decoder and an encoder, and each it takes a
    decoder trains with; an encoder also needs a mask piece. (xpt_ds and data_tools never import each other: the
    two checks are written twice.)"""
    from xpt_ds.config import ConfigError
    from xpt_ds.data.tokenizer import build_tokenizer, tokenizer_for

    def trainer_takes(model: Path, causal: bool) -> bool:
        try:
            tokenizer_for(SimpleNamespace(method="xpt", tokenizer=str(model), mask_token=""), causal=causal)
        except ConfigError as e:
            assert "\n" not in str(e) and str(model) in str(e)
            return False
        return True

    def prepare_takes(model: Path) -> bool:
        try:
            given_tokenizer(model)
        except PrepareError:
            return False
        return True

    taken = {name: (prepare_takes(m), trainer_takes(m, causal=True), trainer_takes(m, causal=False))
             for name, m in models.items()}
    assert taken == {"defaults": (False, False, False), "no_bos_eos": (False, False, False),
                     "pad": (True, True, False), "mask": (True, True, True), "suffix": (False, False, False),
                     "prepared": (True, True, True)}
    decoder = build_tokenizer(str(models["pad"]), causal=True)
    assert decoder.mask_id == decoder.pad_id == 3 and decoder.mask_id in decoder.not_in_shards


def test_spm_specials_adds_a_pad_and_a_mask_and_every_id_stays(text, models, tmp_path):
    """A model of SentencePiece's defaults (no pad, no mask piece) gets both after its last piece: the corpus encodes
    to the same ids, the pad is the model's pad_id and never in encoded text, the mask a piece of its own; prepare
    then takes the model, and so does the trainer, for a decoder and an encoder. Refusals are one line each."""
    from xpt_ds.data.tokenizer import tokenizer_for
    before = spm.SentencePieceProcessor(model_file=str(models["defaults"]))
    out = tmp_path / "mine.model"
    code, err = _cli(["spm-specials", "--tokenizer", str(models["defaults"]), "--out", str(out), "--pad", "<pad>",
                      "--mask", "<mask>"])
    assert code == 0, err
    after = spm.SentencePieceProcessor(model_file=str(out))
    size = before.get_piece_size()
    assert (after.get_piece_size(), after.pad_id(), after.piece_to_id("<mask>")) == (size + 2, size, size + 1)
    lines = text.read_text(encoding="utf-8").splitlines()
    assert after.encode(lines) == before.encode(lines)
    assert after.pad_id() not in after.encode("<pad> 가") and size + 1 in after.encode("가 <mask>")
    given_tokenizer(out)
    for causal in (True, False):
        tok = tokenizer_for(SimpleNamespace(method="xpt", tokenizer=str(out), mask_token=""), causal=causal)
        assert (tok.pad_id, tok.mask_id) == (size, size + 1)
    for argv, needle in [(["--tokenizer", str(out), "--out", str(tmp_path / "x.model"), "--pad", "<p>"],
                          "has a pad already: '<pad>' (id"),
                         (["--tokenizer", str(models["pad"]), "--out", str(tmp_path / "x.model"), "--mask", "<s>"],
                          "--mask '<s>': "),
                         (["--tokenizer", str(models["pad"]), "--out", str(tmp_path / "x.model")], "nothing to add"),
                         (["--tokenizer", str(out), "--out", str(out), "--mask", "<m>"], "--out is --tokenizer")]:
        code, err = _cli(["spm-specials", *argv])
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert code == 2 and len(errors) == 1 and needle in errors[0], err
        assert not (tmp_path / "x.model").exists()


def _cli(argv: list[str]) -> tuple[int, str]:
    from data_tools.cli import main
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
    return code, err.getvalue()
