"""``xpt-ds finetune --precision`` and the best epoch's snapshot: what a 1-8B decoder's fine-tuning keeps in memory.
Under bf16 autocast, LoRA's frozen base weights stored in bf16 give the bits fp32 ones give (autocast rounds them to
bf16 at every call); the snapshot of the best validation epoch holds the trained tensors alone, in one host copy.
On the CPU, autocast is CPU autocast, whose rounding rules are CUDA's; tests/gpu/test_cuda_decoder.py runs the
same comparison on a GPU."""
from __future__ import annotations

import copy

import pytest
import torch

from finetune_builders import FAST, Words, key_word_rows, lora_classifier, lora_step, split_files
from xpt_ds.finetuning.config import FinetuneConfig
from xpt_ds.finetuning.precision import frozen_bases_in_bf16
from xpt_ds.finetuning.run import finetune
from xpt_ds.finetuning.snapshot import BestWeights


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_thread):
    """Fine-tuning tiny models in-process: one intra-op thread (conftest.one_thread)."""


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_bf16_frozen_bases_give_the_bits_of_fp32_ones_under_autocast(family, tiny_decoder):
    source = tiny_decoder(family, family == "gpt2", 0.0)
    fp32 = lora_classifier(source, family)
    bf16 = copy.deepcopy(fp32)
    cast = frozen_bases_in_bf16(bf16)
    bases = {n: p for n, p in bf16.named_parameters() if ".base_layer." in n}
    assert cast == sum(p.numel() for p in bases.values()) > 0
    assert all(p.dtype == torch.bfloat16 for p in bases.values())
    assert all(p.dtype == torch.float32 for n, p in bf16.named_parameters() if n not in bases)  # embeddings,
    # norms, LoRA, the head
    g = torch.Generator().manual_seed(1)
    ids, labels = torch.randint(3, 120, (4, 12), generator=g), torch.tensor([0, 1, 2, 1])
    (want, want_grads), (got, got_grads) = lora_step(fp32, ids, labels), lora_step(bf16, ids, labels)
    assert torch.equal(got, want)
    assert want_grads.keys() == got_grads.keys() and any(".lora_A." in n for n in want_grads)
    assert all(torch.equal(got_grads[n], want_grads[n]) for n in want_grads), \
        [n for n in want_grads if not torch.equal(got_grads[n], want_grads[n])]


def test_best_weights_hold_the_trained_tensors_once_and_restore_them():
    from torch import nn
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Linear(4, 10))
    model[3].weight = model[0].weight  # tied: one tensor under two names
    model[1].requires_grad_(False)
    snapshot = BestWeights(model)
    assert not snapshot.held
    with pytest.raises(RuntimeError):
        snapshot.restore()
    snapshot.keep()
    trained = {n: p.detach().clone() for n, p in model.state_dict().items()}
    # the tied embedding once, the BatchNorm's weight, bias and 3 buffers, the last bias; not the frozen Linear
    assert snapshot.held and snapshot.numel() == 40 + 4 + 4 + 4 + 4 + 1 + 10
    held = [t.data_ptr() for t in snapshot._kept.values()]
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
        model[2].running_mean.add_(1.0)
    snapshot.keep()  # a later best: copied into the same host tensors
    assert [t.data_ptr() for t in snapshot._kept.values()] == held
    moved = {n: p.detach().clone() for n, p in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3.0)
        model[2].running_mean.zero_()
    snapshot.restore()
    after = model.state_dict()
    for name, value in after.items():
        if name.startswith("1."):  # frozen: neither kept nor restored
            assert torch.equal(value, 3 * moved[name]), name
        else:
            assert torch.equal(value, moved[name]), name
    assert model[3].weight is model[0].weight and not torch.equal(moved["0.weight"], trained["0.weight"])


def test_a_lora_run_under_bf16_autocast_keeps_its_best_epoch_and_saves_an_fp32_stock_model(
        xpt_decoder_model, corpus_text, tmp_path, caplog):
    """--precision bf16 on the CPU: the frozen bases in bf16 (a log line says how many), the test scored from the
    best validation epoch, and ``--save-model`` merges the updates in fp32 into a stock model."""
    from safetensors.torch import load_file
    w = Words(corpus_text, xpt_decoder_model, seed=6)
    files = split_files(key_word_rows(w, 200, flip=0.1), tmp_path / "data")
    cfg = FinetuneConfig(model=str(xpt_decoder_model), out=str(tmp_path / "out"), seeds=[1], save_model=True,
                         lora_rank=4, lora_alpha=8.0, precision="bf16", **files, **{**FAST, "epochs": 3})
    with caplog.at_level("INFO", logger="xpt_ds.cli.finetune"):
        res = finetune(cfg)
    assert "frozen weights of the adapted linear maps are stored in bf16" in caplog.text
    seed = res["seeds"][0]
    assert res["arithmetic"] == "bf16 autocast" and res["config"]["precision"] == "bf16"
    best = max(range(3), key=lambda e: (seed["history"][e]["valid"]["accuracy"], -e))
    assert seed["epoch"] == best + 1 and seed["valid"] == seed["history"][best]["valid"]
    assert seed["test"]["accuracy"] > res["majority_baseline"]["accuracy"], seed
    weights = load_file(tmp_path / "out/model/model.safetensors")
    source = load_file(xpt_decoder_model / "model.safetensors")
    assert all(t.dtype == torch.float32 for t in weights.values())
    q = "model.layers.0.self_attn.q_proj.weight"
    # the update merged onto the bf16-rounded base, summed in fp32: not the base's rounding
    assert not torch.equal(weights[q], source[q]) and not torch.equal(weights[q], weights[q].bfloat16().float())


def test_precision_is_checked_before_anything_loads(tmp_path, capsys):
    f = tmp_path / "t.jsonl"
    f.write_text('{"text": "a", "label": 0}\n')
    from xpt_ds.cli.finetune import main
    assert main(["--model", str(tmp_path), "--train", str(f), "--test", str(f), "--out", str(tmp_path / "out"),
                 "--precision", "fp16"]) == 2
    assert capsys.readouterr().err.strip() == \
        "error: --precision has a bad value: 'fp16' (must be auto, fp32, bf16)"
