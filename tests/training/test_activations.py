"""``activations.checkpoint_every`` (xpt_ds.model.forward.recompute): the layers it names recompute in the backward
instead of keeping their activations, and the step computes the same bits. In one process on every model kind the
trainer builds (XPT with frozen source layers, Adapters, TreLM's TRILayer, a Llama XPT, GPT-2 with LoRA), and
through torchrun on 2 ranks at ZeRO-3, against the same run without it."""
import copy
import math

import pytest
import torch

from conftest import REPO, base_config, launch, read_metrics, write_config
from xpt_ds.export.hf import load_checkpoint_fp32
from xpt_ds.checkpoint.tags import tag_for
from xpt_ds.config import ConfigError, ModelConfig, TrainConfig, from_dict, validate
from xpt_ds.data.tokenizer import build_tokenizer
from xpt_ds.model.build import build_model
from xpt_ds.model.forward.objective import build_objective
from xpt_ds.model.forward.recompute import checkpoint_layers, recomputed_layers

# model kind -> (source fixture and its arguments, corpus fixture, method, layers: stack + ITLs + TRILayer)
KINDS = {
    "xpt_roberta_phase1": ("tiny_roberta", (), "corpus", "xpt", 4),
    "adapters_bert": ("tiny_bert", (), "corpus_bert", "adapters", 2),
    "trelm_bert": ("tiny_bert", (), "corpus_bert", "trelm", 3),
    "xpt_llama_untied": ("tiny_decoder", ("llama", False), "corpus", "xpt", 4),
    "lora_gpt2": ("tiny_decoder", ("gpt2", True), "corpus", "lora", 2),
}


def _objective(request, kind: str):
    source_fixture, args, corpus_fixture, method, layers = KINDS[kind]
    source = request.getfixturevalue(source_fixture)
    source = source(*args) if args else source
    corpus = request.getfixturevalue(corpus_fixture)
    cfg = ModelConfig(source=str(source), tokenizer=str(corpus / "spm.model"), method=method)
    built = build_model(cfg, build_tokenizer(cfg.tokenizer))
    for name, p in built.model.named_parameters():  # phase 1's freeze: the reused layers pass gradients on only
        p.requires_grad_(not (method == "xpt" and "@source" in built.tags[name]))
    return build_objective(built.model).train(), layers


def _batch(objective, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    B, T, V = 3, 24, objective.hf.config.vocab_size
    batch = {"input_ids": torch.randint(5, V, (B, T), generator=g),
             "mlm_positions": torch.randperm(B * T, generator=g)[:12].sort().values,
             "mlm_targets": torch.randint(5, V, (12,), generator=g)}
    if "position_ids" in objective.forward.__code__.co_varnames:  # a decoder's packed rows: positions per row
        batch["position_ids"] = torch.arange(T).expand(B, T)
    return batch


def _step(objective, batch, seed: int = 11) -> tuple[torch.Tensor, dict, int]:
    """(loss, gradients, bytes the forward saved for the backward); dropout from ``seed``."""
    saved = [0]

    def pack(t):
        saved[0] += t.numel() * t.element_size()
        return t

    objective.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = objective(**batch)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in objective.named_parameters() if p.grad is not None}
    return loss.detach(), grads, saved[0]


@pytest.mark.parametrize("kind", list(KINDS))
def test_recomputed_layers_give_the_same_gradients_and_keep_less(request, kind):
    plain, layers = _objective(request, kind)
    ckpt = copy.deepcopy(plain)
    assert recomputed_layers(ckpt.hf) == (0, layers)
    assert checkpoint_layers(ckpt.hf, 1) == (layers, layers)
    batch = _batch(plain)
    loss, grads, kept = _step(plain, batch)
    loss_c, grads_c, kept_c = _step(ckpt, batch)
    assert not torch.equal(_step(plain, batch, seed=12)[0], loss)  # dropout is on: masks to reproduce
    assert torch.equal(loss, loss_c)
    assert grads.keys() == grads_c.keys() and grads
    assert all(torch.equal(grads[n], grads_c[n]) for n in grads), [n for n in grads if not torch.equal(grads[n],
                                                                                                       grads_c[n])]
    assert kept_c < kept / 2, (kept_c, kept)
    with torch.no_grad():  # evaluation: nothing to recompute, the same logits
        ckpt.eval(), plain.eval()
        assert torch.equal(plain(**batch, return_logits=True), ckpt(**batch, return_logits=True))


def test_every_nth_layer(request):
    objective, layers = _objective(request, "xpt_roberta_phase1")
    assert checkpoint_layers(objective.hf, 3) == (math.ceil(layers / 3), layers)  # layers 0 and 3: the two ITLs
    stack = objective.hf.roberta.encoder.layer
    assert [bool(layer.gradient_checkpointing) for layer in stack] == [True, False, False, True]


def _cfg(**top) -> TrainConfig:
    return from_dict(TrainConfig, {"model": {"source": "s", "tokenizer": "t.model"},
                                   "phases": [{"name": "p", "steps": 1}],
                      "data": {"train_shards": ["x.tar"]}, **top})


@pytest.mark.parametrize("top,message", [
    ({"activations": {"checkpoint_every": -1}}, r"^config key 'activations.checkpoint_every' must be >= 0"),
    ({"activations": {"checkpoint_every": 1}, "compile": True},
     r"^config key 'activations.checkpoint_every' is set with compile: true; use one of them"),
])
def test_bad_settings_are_refused_in_one_line(top, message):
    with pytest.raises(ConfigError, match=message):
        validate(_cfg(**top))


@pytest.mark.multiproc
def test_zero3_run_with_recomputation_trains_the_same_bits(straight_runs, tiny_roberta, corpus, tmp_path):
    """2 ranks, ZeRO-3 (whose hooks gather each layer's weights again in the recomputation), fp32, dropout 0.1,
    both phases: every logged loss and the last checkpoint's weights equal the run without it."""
    straight = straight_runs(3)
    cfg = base_config(tmp_path / "run", tiny_roberta, corpus, checkpoint={"every_steps": 0},
                      deepspeed=str(REPO / "ds_configs/zero3_fp32.json"), activations={"checkpoint_every": 1})
    proc = launch(["--config", str(write_config(tmp_path / "cfg.yaml", cfg))], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "activation checkpointing: 4 of 4 layers recompute in the backward" in proc.stderr + proc.stdout
    losses = [{s: r["train/loss"] for s, r in read_metrics(run).items() if "train/loss" in r}
              for run in (straight / "run", tmp_path / "run")]
    assert len(losses[0]) == 8 and losses[0] == losses[1]
    weights = [load_checkpoint_fp32(run / "checkpoints", tag_for(8)) for run in (straight / "run", tmp_path / "run")]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
