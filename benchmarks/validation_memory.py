"""Host memory of scoring one decoder validation micro-batch: 4 rows of 2,048 positions, Llama 3's 128,256-piece
vocabulary, a 2-layer Llama of SmolLM2's width (random weights, fp32, CPU). ``whole``: the objective's [M, V]
logits into ``MLMStats`` at once, as validation and ``evaluate`` did before 2026-11-30; ``parts``: the
objective's ``score`` path (``xpt_ds.model.forward.causal_lm``), the loss's chunks one at a time. One process per way,
as the peak RSS is the process's:

    python benchmarks/validation_memory.py whole
    python benchmarks/validation_memory.py parts

Prints a JSON line: seconds, max RSS, and the metrics (which agree to float32 summation)."""
import json, resource, sys, time
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from xpt_ds.metrics.mlm import MLMStats
from xpt_ds.model.forward.causal_lm import CausalLMObjective
torch.manual_seed(0)
V, T, B = 128256, 2048, 4
model = LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=576, intermediate_size=1536, num_hidden_layers=2,
                                     num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=T)).eval()
ids = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(1))
pos = torch.arange(T).repeat(B, 1)
flat = torch.arange(B * T).view(B, T)[:, :-1].reshape(-1)
batch = dict(input_ids=ids, position_ids=pos, mlm_positions=flat, mlm_targets=ids.view(-1)[flat + 1])
objective, stats = CausalLMObjective(model), MLMStats()
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.time()
with torch.no_grad():
    if sys.argv[1] == "whole":
        stats.update(objective(**batch, return_logits=True), batch["mlm_targets"])
    else:
        objective(**batch, score=stats.update)
r = stats.result()
print(json.dumps({"way": sys.argv[1], "positions": int(flat.numel()), "s": round(time.time() - t, 1),
                  "max_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2),
                  "rss_before_gb": round(base / 1e6, 2), "loss": r["loss"], "mrr": r["mrr"], "mr": r["mr"]}))
