"""model.attention: flex on one GPU (xpt_ds.model.forward.document_mask): FlexAttention with a document BlockMask,
compiled, against SDPA on the dense block-diagonal mask, in bf16. In process: the logits, the loss and its gradients
agree within bf16 rounding, and a document inside a packed row gets the logits it gets alone. Through the trainer: two
phases under ZeRO-2 with FusedAdam train with the same losses as the SDPA run within bf16 rounding. Skipped without
CUDA: FlexAttention has no backward on the CPU (tests/model/test_document_mask.py covers its forward there)."""
from __future__ import annotations

import pytest
import torch
from gpu_builders import gpu_config, losses, report, train

from xpt_ds.model.forward.causal_lm import CausalLMObjective

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def _model():
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=2000, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=4096, use_cache=False)
    return LlamaForCausalLM._from_config(config, attn_implementation="sdpa", dtype=torch.bfloat16).cuda()


def _batch(B: int = 4, T: int = 1024) -> dict:
    g = torch.Generator().manual_seed(1)
    starts = torch.rand(B, T, generator=g) < 1 / 200  # documents of ~200 tokens
    starts[:, 0] = True
    col = torch.arange(T).expand(B, T)
    pos = col - torch.cummax(torch.where(starts, col, 0), dim=1).values
    ids = torch.randint(5, 2000, (B, T), generator=g)
    predict = torch.arange(B * T - 1)
    return {k: v.cuda() for k, v in dict(input_ids=ids, position_ids=pos, mlm_positions=predict,
                                         mlm_targets=ids.flatten()[predict + 1]).items()}


def test_flex_matches_sdpa_in_bf16_and_keeps_documents_apart():
    batch = _batch()
    got = {}
    for attention in ("sdpa", "flex"):
        model = _model()
        objective = CausalLMObjective(model, attention=attention)
        loss = objective(**batch)
        loss.backward()
        with torch.no_grad():
            logits = objective(**batch, return_logits=True).float()
        got[attention] = (loss.detach().float(), logits, {n: p.grad.float() for n, p in model.named_parameters()})
    (l0, z0, g0), (l1, z1, g1) = got["sdpa"], got["flex"]
    cosines = {n: float(torch.nn.functional.cosine_similarity(g0[n].flatten(), g1[n].flatten(), dim=0)) for n in g0}
    report("document_mask_in_process", {"loss": [float(l0), float(l1)], "max_logit_diff": float((z0 - z1).abs().max()),
                                        "min_grad_cosine": min(cosines.values())})
    assert abs(float(l0) - float(l1)) < 2e-2 * abs(float(l0)), (l0, l1)
    assert (z0 - z1).abs().max() < 0.1 and (z0 - z1).abs().mean() < 1e-2
    assert min(cosines.values()) > 0.99, sorted(cosines.items(), key=lambda kv: kv[1])[:3]
    # A document inside a packed row: its logits are those of the document alone (bf16 rounding apart).
    pos = batch["position_ids"][0].cpu()
    starts = (pos == 0).nonzero().squeeze(1).tolist() + [len(pos)]
    a, b = max(zip(starts, starts[1:]), key=lambda ab: ab[1] - ab[0])
    flex = CausalLMObjective(_model(), attention="flex")
    with torch.no_grad():
        alone = flex(input_ids=batch["input_ids"][:1, a:b], position_ids=batch["position_ids"][:1, a:b],
                     mlm_positions=torch.arange(b - a, device="cuda"), mlm_targets=batch["input_ids"][0, a:b],
                     return_logits=True).float()
    assert b - a > 50 and (alone - z1[a:b]).abs().max() < 0.1, (a, b)


def test_training_with_flex_follows_sdpa(tmp_path, tiny_decoder, corpus):
    source = tiny_decoder("llama", False, 0.0)
    runs = {}
    for attention in ("sdpa", "flex"):
        cfg = gpu_config(tmp_path / attention, source, corpus, "zero2_bf16")
        cfg["model"]["attention"] = attention
        cfg["data"]["seq_len"] = 64
        train(tmp_path / attention, cfg, compile=attention == "flex")  # flex: compiled, as in a real run
        runs[attention] = losses(tmp_path / attention / "run")
    report("document_mask_training", runs)
    assert len(runs["flex"]) == len(runs["sdpa"]) > 0
    for a, b in zip(runs["sdpa"], runs["flex"]):
        assert abs(a - b) < 3e-2 * abs(a), runs
