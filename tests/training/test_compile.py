"""``compile: true`` compiles the layer stack and the head in place (xpt_ds.training.compile): names, state dicts
and phase tags stay as they were, and ZeRO-3 is refused in one line. The compiled run itself is checked on a GPU
(tests/gpu/test_cuda.py::test_compile_trains_like_eager); compiling on 2 CPU cores would take minutes."""
import pytest
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, RobertaConfig, RobertaForMaskedLM

from xpt_ds.config import ConfigError
from xpt_ds.model.forward.objective import MaskedLMObjective
from xpt_ds.training.compile import compile_blocks


class Wrapped:
    def __init__(self, hf):
        self.hf = hf


@pytest.mark.parametrize("model", [
    lambda: RobertaForMaskedLM(RobertaConfig(vocab_size=50, hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                                             intermediate_size=64)),
    lambda: GPT2LMHeadModel(GPT2Config(vocab_size=50, n_embd=32, n_layer=3, n_head=2, bos_token_id=0, eos_token_id=0)),
    lambda: LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                                         intermediate_size=64)),
], ids=["roberta", "gpt2", "llama"])
def test_compiles_every_layer_and_the_head_in_place(model):
    hf = model()
    before = list(hf.state_dict())
    assert compile_blocks(Wrapped(hf), stage=2) == 4  # 3 layers + the head
    assert list(hf.state_dict()) == before
    stack = getattr(hf, hf.base_model_prefix)
    layers = stack.encoder.layer if hasattr(stack, "encoder") else getattr(stack, "layers", None) or stack.h
    assert all(layer._compiled_call_impl is not None for layer in layers)


def test_zero3_is_refused_in_one_line():
    hf = RobertaForMaskedLM(RobertaConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                          intermediate_size=64))
    with pytest.raises(ConfigError, match=r"^config key 'compile': .*ZeRO stages 0-2, not 3$"):
        compile_blocks(MaskedLMObjective(hf), stage=3)
