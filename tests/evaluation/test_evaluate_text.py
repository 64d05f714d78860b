"""``xpt-ds evaluate --model M --text FILE``: bits per byte on raw text under the model's own tokenizer, on a tiny
stock GPT-2 xpt-ds did not write, against a hand computation from its logits; documents apart, long documents in
windows, the JSON, the same model named by a hub id (read from the Hugging Face cache), and one-line errors."""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

import pytest
import torch

from hub_cache import cache_repo
from xpt_ds.cli.evaluate import main
from xpt_ds.evaluation.text_bpb import load_decoder, score_file, windows

LINES = ["the cat sat on the mat", "a dog ran to the park and sat down", "привіт світ, the end"]


def _tokenizer(out, bos: bool, eos: bool = True):
    """A byte-level BPE of a few hundred pieces, GPT-2's kind (bos = eos = <|endoftext|>), or without a bos (Qwen2's
    kind), or with neither."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(LINES * 20, vocab_size=300, min_frequency=2, show_progress=False,
                            special_tokens=["<|endoftext|>"])
    specials = {name: "<|endoftext|>" for name, given in (("bos_token", bos), ("eos_token", eos)) if given}
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, **specials)
    tok.save_pretrained(str(out))
    return tok


def _gpt2(out, bos: bool = True, eos: bool = True):
    """A stock GPT2LMHeadModel (random weights, 2 layers, hidden 64, 32 positions) and its tokenizer."""
    from transformers import GPT2Config, GPT2LMHeadModel
    tok = _tokenizer(out, bos, eos)
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=64, n_layer=2, n_head=2, n_positions=32,
                               bos_token_id=0, eos_token_id=0)).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    return _gpt2(tmp_path_factory.mktemp("gpt2"))


@pytest.fixture(scope="module")
def loaded(gpt2):
    return load_decoder(gpt2)


def _file(path, lines):
    path.write_text("\n".join(lines) + "\n\n", encoding="utf-8")  # a blank line is no document
    return path


def _hand_nats(model, tok, doc: str) -> float:
    """Next-piece NLL of one document read whole from bos, from the model's logits in float64."""
    ids = [tok.bos_token_id] + tok(doc, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].double()
    logp = torch.log_softmax(logits[:-1], -1)
    return -float(logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].sum())


@pytest.mark.parametrize("batch_size", [1, 16])
def test_bits_per_byte_is_the_hand_computation(loaded, tmp_path, batch_size):
    model, tok = loaded
    got = score_file(model, tok, _file(tmp_path / "t.txt", LINES), seq_len=32, batch_size=batch_size)
    nats = sum(_hand_nats(model, tok, d) for d in LINES)
    n_bytes = sum(len(d.encode()) for d in LINES)
    assert got["bytes"] == n_bytes and got["documents"] == 3 and got["words"] == sum(len(d.split()) for d in LINES)
    assert got["tokens"] == got["pieces"]  # each document's first piece too, predicted from bos
    assert got["bits_per_byte"] == pytest.approx(nats / math.log(2) / n_bytes, abs=1e-6)
    assert got["pieces_per_word"] == got["pieces"] / got["words"] and "from bos '<|endoftext|>'" in got["first_token"]


def test_documents_do_not_see_each_other(loaded, tmp_path):
    model, tok = loaded
    both = score_file(model, tok, _file(tmp_path / "ab.txt", LINES[:2]), seq_len=32)
    alone = [score_file(model, tok, _file(tmp_path / f"{i}.txt", [d]), seq_len=32)["nats"]
             for i, d in enumerate(LINES[:2])]
    assert both["nats"] == pytest.approx(sum(alone), rel=1e-7)  # float32 logits of other batch shapes
    joined = score_file(model, tok, _file(tmp_path / "j.txt", [" ".join(LINES[:2])]), seq_len=32)
    assert abs(joined["nats"] - both["nats"]) > 1e-3  # read as one document, the second part has context


def test_a_long_document_is_scored_in_windows(loaded, tmp_path):
    """seq_len 8: every piece predicted once; window k reads pieces 8k .. 8k+7 (bos first)."""
    model, tok = loaded
    doc = " ".join(LINES[:2])
    ids = [tok.bos_token_id] + tok(doc, add_special_tokens=False)["input_ids"]
    pairs = windows(ids, 8)
    assert [t for _, t in pairs] == [ids[k + 1:k + 9] for k in range(0, len(ids) - 1, 8)]
    assert all(i[1:] == t[:-1] for i, t in pairs)
    got = score_file(model, tok, _file(tmp_path / "w.txt", [doc]), seq_len=8)
    with torch.no_grad():
        hand = sum(-float(torch.log_softmax(model(torch.tensor([i])).logits[0].double(), -1)[
            torch.arange(len(t)), torch.tensor(t)].sum()) for i, t in pairs)
    assert got["tokens"] == len(ids) - 1 and got["windows"] == math.ceil((len(ids) - 1) / 8)
    assert got["nats"] == pytest.approx(hand, rel=1e-6)



@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_a_window_longer_than_a_forward_pass_reads_the_earlier_positions_from_the_cache(loaded, tmp_path,
                                                                                        monkeypatch, family):
    """With ``BATCH_TOKENS`` 5, a document's one window (23 predictions) runs 5 positions a forward pass, each
    reading the earlier ones from the key-value cache (GPT-2's learned positions; Llama's rotary ones): the hand
    computation from one whole pass, and no forward pass gets more than 5 positions."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from xpt_ds.evaluation import text_bpb
    model, tok = loaded
    if family == "llama":
        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=64, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
                                             max_position_embeddings=32, bos_token_id=0, eos_token_id=0)).eval()
    doc = " ".join(LINES[:2]) + " " + LINES[0]
    ids = [tok.bos_token_id] + tok(doc, add_special_tokens=False)["input_ids"]
    assert len(ids) - 1 > 3 * 5
    seen = []
    hook = model.register_forward_pre_hook(lambda m, a, kw: seen.append(kw["input_ids"].shape[1]), with_kwargs=True)
    monkeypatch.setattr(text_bpb, "BATCH_TOKENS", 5)
    got = score_file(model, tok, _file(tmp_path / "long.txt", [doc]), seq_len=32)
    hook.remove()
    assert got["windows"] == 1 and got["tokens"] == len(ids) - 1
    assert seen == [5] * ((len(ids) - 1) // 5) + ([(len(ids) - 1) % 5] if (len(ids) - 1) % 5 else [])
    assert got["nats"] == pytest.approx(_hand_nats(model, tok, doc), rel=1e-6)


def test_a_model_that_keeps_no_cache_reads_a_long_window_in_one_pass(loaded, tmp_path, monkeypatch):
    """A causal LM of its own code that returns no cache: the window is read whole, as before, not in parts that
    would each lose the earlier positions."""
    import types

    from xpt_ds.evaluation import text_bpb
    model, tok = loaded

    class NoCache(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, input_ids, attention_mask=None, **kw):
            return types.SimpleNamespace(logits=self.inner(input_ids=input_ids, attention_mask=attention_mask).logits)
    doc = " ".join(LINES[:2]) + " " + LINES[0]
    monkeypatch.setattr(text_bpb, "BATCH_TOKENS", 5)
    got = score_file(NoCache().eval(), tok, _file(tmp_path / "long.txt", [doc]), seq_len=32)
    assert got["nats"] == pytest.approx(_hand_nats(model, tok, doc), rel=1e-6)

def test_without_bos_the_first_piece_is_predicted_from_eos_and_every_byte_is_paid_for(loaded, tmp_path):
    """A tokenizer without a bos (Qwen2's kind): each document is read after its eos, as lm-evaluation-harness
    reads it, so its first piece is scored too. The same weights with GPT-2's tokenizer, whose bos is that same
    token, give the same figures; leaving the first piece out made bits per byte lower (1.83 against 2.11)."""
    model, tok = load_decoder(_gpt2(tmp_path / "m", bos=False))
    assert tok.bos_token_id is None and tok.eos_token_id == loaded[1].bos_token_id
    got = score_file(model, tok, _file(tmp_path / "t.txt", LINES), seq_len=32)
    assert got["tokens"] == got["pieces"] and got["first_token"].startswith("predicted from eos '<|endoftext|>'")
    with_bos = score_file(*loaded, tmp_path / "t.txt", seq_len=32)
    assert got["bits_per_byte"] == pytest.approx(with_bos["bits_per_byte"], rel=1e-9)
    assert got["nats"] == pytest.approx(sum(_hand_nats(*loaded, d) for d in LINES), rel=1e-6)


def test_a_tokenizer_with_neither_bos_nor_eos_is_refused(tmp_path, capsys):
    """Nothing would predict a document's first piece, whose bytes count: one line naming the model, before its
    weights are read."""
    model = _gpt2(tmp_path / "m", bos=False, eos=False)
    (model / "model.safetensors").write_bytes(b"not read")
    capsys.readouterr()  # save_pretrained's progress bar
    err = _error(["--model", str(model), "--text", str(_file(tmp_path / "t.txt", LINES))], capsys)
    assert f"--model {model}: its tokenizer has neither a bos nor an eos token" in err


def test_cli_json(gpt2, tmp_path, capsys):
    en, uk = _file(tmp_path / "en.txt", LINES[:2]), _file(tmp_path / "uk.txt", LINES[2:])
    assert main(["--model", str(gpt2), "--text", str(en), str(uk), "--out", str(tmp_path / "o.json")]) == 0
    printed = capsys.readouterr().out
    result = json.loads(printed)
    assert (tmp_path / "o.json").read_text(encoding="utf-8") == printed
    assert result["model"] == str(gpt2) and result["seq_len"] == 32 and list(result["text"]) == [str(en), str(uk)]
    assert {"bits_per_byte", "nats", "tokens", "bytes", "pieces_per_word", "first_token"} <= \
        set(result["text"][str(uk)])


def test_a_bf16_model_is_scored_in_float32_unless_asked(gpt2, tmp_path, capsys):
    """--dtype float32 (the default) scores a model stored in bf16 exactly as an fp32 copy of its (rounded) weights:
    a bf16 source and an fp32 export are scored alike. auto runs it as stored, and the JSON says which."""
    from transformers import AutoModelForCausalLM
    stored, widened = tmp_path / "bf16", tmp_path / "fp32"
    AutoModelForCausalLM.from_pretrained(gpt2, dtype=torch.bfloat16).save_pretrained(stored)
    AutoModelForCausalLM.from_pretrained(stored, dtype=torch.float32).save_pretrained(widened)
    for d in (stored, widened):
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(gpt2 / f, d / f)
    text = str(_file(tmp_path / "t.txt", LINES))

    def scored(*argv):
        assert main(["--text", text, *argv]) == 0
        result = json.loads(capsys.readouterr().out)
        return result["dtype"], result["text"][text]["bits_per_byte"]

    default, as_fp32 = scored("--model", str(stored)), scored("--model", str(widened))
    assert default[0] == "float32" and default == as_fp32
    dtype, bpb = scored("--model", str(stored), "--dtype", "auto")
    assert dtype == "bfloat16" and bpb != default[1]
    with pytest.raises(SystemExit) as e:  # argparse's usage error
        main(["--model", str(gpt2), "--shards", text, "--dtype", "auto"])
    assert e.value.code == 2 and "--dtype is for --text" in capsys.readouterr().err


def _error(argv, capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: "), err
    return err


def test_one_line_errors(gpt2, tmp_path, capsys, tiny_roberta):
    text = str(_file(tmp_path / "t.txt", LINES))
    assert "--text nope.txt: no such file" in _error(["--model", str(gpt2), "--text", "nope.txt"], capsys)
    bare = tmp_path / "bare"
    bare.mkdir()
    for f in ("config.json", "model.safetensors"):
        shutil.copy(gpt2 / f, bare / f)
    assert "has no tokenizer files" in _error(["--model", str(bare), "--text", text], capsys)
    assert "not a decoder" in _error(["--model", str(tiny_roberta), "--text", text], capsys)
    assert "m.gguf: no such .gguf file" in _error(["--model", str(tmp_path / "m.gguf"), "--text", text], capsys)
    assert f"{tmp_path / 'nope'}: no such directory" in _error(["--model", str(tmp_path / "nope"), "--text", text],
                                                                capsys)
    (tmp_path / "bad.txt").write_bytes(b"ok\n\xff\xfe\n")
    assert "line 2 is not UTF-8" in _error(["--model", str(gpt2), "--text", str(tmp_path / "bad.txt")], capsys)


def test_a_hub_id_is_scored_from_the_cache_as_its_directory_is(gpt2, tmp_path, capsys):
    """``--model org/name`` as a user on a cluster without internet runs it (HF_HUB_CACHE, HF_HUB_OFFLINE=1), from
    another directory: the same figures as the model's directory gives."""
    cache_repo(tmp_path / "hub", "org/tiny-gpt2", gpt2)
    text = _file(tmp_path / "t.txt", LINES)
    assert main(["--model", str(gpt2), "--text", str(text)]) == 0
    direct = json.loads(capsys.readouterr().out)["text"][str(text)]
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "xpt_ds.cli.evaluate", "--model", "org/tiny-gpt2", "--text",
                           str(text)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["model"] == "org/tiny-gpt2" and result["seq_len"] == 32
    hub = result["text"][str(text)]
    assert {k: v for k, v in hub.items() if k != "bits_per_byte"} == \
        {k: v for k, v in direct.items() if k != "bits_per_byte"}
    assert hub["bits_per_byte"] == pytest.approx(direct["bits_per_byte"], rel=1e-6)


def test_hub_ids_get_the_same_one_line_errors(gpt2, tiny_roberta, tmp_path, monkeypatch, capsys):
    """A cached hub id without tokenizer files, one of a masked LM, one that ships code (not run without
    --trust-remote-code), and one the cache does not hold with the hub switched off: each one line naming the id,
    before any weights are read."""
    from huggingface_hub import constants
    cache_repo(tmp_path / "hub", "org/bare", gpt2, {"tokenizer.json", "tokenizer_config.json"})
    cache_repo(tmp_path / "hub", "org/roberta", tiny_roberta)
    code = cache_repo(tmp_path / "hub", "org/code", gpt2)
    config = json.loads((code / "config.json").read_text())
    (code / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoModelForCausalLM": "modeling_x.X"}}))
    (code / "modeling_x.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.chdir(tmp_path)
    text = str(_file(tmp_path / "t.txt", LINES))
    assert "--model org/bare has no tokenizer files" in _error(["--model", "org/bare", "--text", text], capsys)
    assert "--model org/roberta is a roberta model" in _error(["--model", "org/roberta", "--text", text], capsys)
    assert "org/code: modeling_x.py is not the code this xpt-ds exports" in _error(
        ["--model", "org/code", "--text", text], capsys)
    assert not (tmp_path / "ran").exists()
    err = _error(["--model", "org/none", "--text", text], capsys)
    assert "--model org/none" in err and "HF_HUB_OFFLINE is set" in err, err


def test_a_caller_that_names_the_model_otherwise_gets_its_own_name_in_the_lines(gpt2, tmp_path):
    """The decoder probe loads the source as ``evaluate --text`` loads a model, but from ``--source`` or the run's
    model.source: a line about it names that, never ``--model`` or ``--text``, which the user did not give."""
    from xpt_ds.errors import UserError
    bare = tmp_path / "bare"
    bare.mkdir()
    for f in ("config.json", "model.safetensors"):
        shutil.copy(gpt2 / f, bare / f)
    what = f"model.source {bare} (the run's config)"
    with pytest.raises(UserError) as info:
        load_decoder(bare, what=what)
    assert str(info.value).startswith(f"{what} has no tokenizer files")
    assert "--model" not in str(info.value) and "--text" not in str(info.value)
