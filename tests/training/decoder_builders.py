"""What the decoder training tests share with their GPU twin (test_decoder_train, tests/gpu/test_cuda_decoder): the
stock classes by family, the probe ids, and ``check_phase1``, the phase-1 boundary's frozen weights and optimizer
state read from a checkpoint (on the CPU, so it also checks a GPU run)."""
from __future__ import annotations

import torch
from conftest import read_frozen
from transformers import (
    AutoConfig,
    Gemma2ForCausalLM,
    GPT2LMHeadModel,
    LlamaForCausalLM,
    MistralForCausalLM,
    Qwen2ForCausalLM,
)

from xpt_ds.model.forward.objective import strip_prefix
from xpt_ds.model.skeleton import skeleton


CLASSES = {"gpt2": GPT2LMHeadModel, "llama": LlamaForCausalLM, "mistral": MistralForCausalLM,
           "qwen2": Qwen2ForCausalLM, "qwen2_full": Qwen2ForCausalLM, "gemma2": Gemma2ForCausalLM}
# The class of an export, where it is not the source's: a Qwen2 target of full attention and its own vocabulary is
# exported as the Llama model of the same function (xpt_ds.export.llama_layout)
EXPORTED = {**CLASSES, "qwen2_full": LlamaForCausalLM}


def reused_of(source, family: str) -> tuple[dict[str, str], dict[str, torch.Tensor]]:
    """(target name -> source name of every parameter phase 1 keeps frozen, the source's state dict): the L
    source layers one index later, the final norm, GPT-2's learned positions."""
    src = CLASSES[family].from_pretrained(source).state_dict()
    layers, extra = ("transformer.h", ("transformer.wpe", "transformer.ln_f")) if family == "gpt2" else \
        ("model.layers", ("model.norm",))
    reused = {k.replace(f"{layers}.{i}.", f"{layers}.{i + 1}.", 1): k for k in src for i in range(2)
              if k.startswith(f"{layers}.{i}.")}
    return reused | {k: k for k in src if k.startswith(extra)}, src


def check_phase1(tag_dir, source, family: str, stage: int, world: int) -> None:
    """At the boundary: the frozen parameters are the source's bit for bit (fp32, in frozen_fp32.safetensors; the
    module states, which stages 0-2 write whole, leave them out); the optimizer holds fp32 masters and Adam
    moments for exactly the trainable parameters, summed over the ranks' partitions. Loads to the CPU, so it
    also checks a run on a GPU (tests/gpu/test_cuda_decoder.py)."""
    def load(name: str) -> dict:
        return torch.load(tag_dir / name, map_location="cpu", weights_only=False)

    reused, src = reused_of(source, family)
    frozen = strip_prefix(read_frozen(tag_dir))
    assert set(frozen) == set(reused)
    assert all(torch.equal(frozen[t], src[s]) for t, s in reused.items())
    model = skeleton(AutoConfig.from_pretrained(tag_dir / "hf_config"))
    trainable = {n: p.numel() for n, p in model.named_parameters() if n not in frozen}  # a tied head: one name
    assert trainable and all(n.startswith(("lm_head.", "transformer.wte.", "model.embed_tokens.")) or
                             ".0." in n or ".3." in n for n in trainable)  # embeddings, head, the two ITLs
    want = sum(trainable.values())
    if stage == 3:
        states = [load(f"zero_pp_rank_{r}_mp_rank_00_model_states.pt") for r in range(world)]
        prefix = "bf16_" if (tag_dir / "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt").exists() else ""
        optim = [load(f"{prefix}zero_pp_rank_{r}_mp_rank_00_optim_states.pt")["optimizer_state_dict"]
                 for r in range(world)]
        padded = masters = sum(t.numel() for o in optim for t in o["fp32_flat_groups"])
        moments = [o["optimizer_state_dict"]["state"] for o in optim]
    else:  # the module states leave the frozen parameters out: frozen_fp32.safetensors holds them, once
        states = [load("mp_rank_00_model_states.pt")]
        module = strip_prefix(states[0]["module"])
        assert not set(module) & set(reused) and set(trainable) <= set(module)
        dtype = module[next(iter(trainable))].dtype
        if stage == 0:  # the engine's module is the fp32 master; the torch optimizer's own state, per parameter
            padded = masters = want
            moments = [states[0]["optimizer"]["state"]]
            assert len(moments[0]) == len(trainable)
        else:
            prefix = "bf16_" if dtype == torch.bfloat16 else ""
            optim = [load(f"{prefix}zero_pp_rank_{r}_mp_rank_00_optim_states.pt")["optimizer_state_dict"]
                     for r in range(world)]
            padded = sum(t.numel() for o in optim for t in o["single_partition_of_fp32_groups"])
            masters = padded - sum(sum(o["group_paddings"]) for o in optim)
            moments = [o["base_optimizer_state"]["state"] for o in optim]
    if stage:  # DeepSpeed's list of the parameters it optimizes, on every rank
        assert all({n.removeprefix("hf.") for g in s["param_shapes"] for n in g} == set(trainable) for s in states)
    assert masters == want
    assert sum(v["exp_avg"].numel() for m in moments for v in m.values()) == padded
    assert sum(v["exp_avg_sq"].numel() for m in moments for v in m.values()) == padded


def probe_ids() -> torch.Tensor:
    ids = torch.randint(5, 200, (2, 20), generator=torch.Generator().manual_seed(0))
    ids[:, 0] = 0
    return ids
