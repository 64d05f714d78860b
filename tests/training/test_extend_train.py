"""``method: extend`` trained on 2 ranks through torchrun: a tiny source with a byte-level BPE tokenizer, the
tokenizer extended by ``xpt-data extend-vocab`` with the synthetic corpus's (Hangul) pieces, shards made with it.
Phase 1 (the preset: the new input and head rows) leaves every old row bitwise the source's, with no optimizer
state and no weight decay (``optim.weight_decay`` 0.1), while the new rows move; its export is a stock model that
gives English text the source's ids and logits and generates; phase 2 (``@all``) moves the old rows too.
GPT-2 tied under ZeRO-2, Llama untied under ZeRO-3."""
import json

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from conftest import base_config, launch, read_frozen, write_config
from xpt_ds.export.hf import load_checkpoint_fp32
from xpt_ds.checkpoint.tags import tag_for
from xpt_ds.model.forward.objective import strip_prefix

pytestmark = pytest.mark.multiproc

WORDS = ("the of and to in is was that for it with as on be at by this had not are but from or have an they which one "
         "you were her all she there would their we him been has when who will more no if out so said what up its "
         "about into than them can only other new some could time these two may then do first any my now such like "
         "our over man me even most made after also did many before must through back years where much your way"
         ).split()
ENGLISH = "the first man said that we were all in the water before it was time to go back"


def _english_lines(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, rng.integers(5, 12))) + "." for _ in range(n)]


def _source(out, family: str, tied: bool):
    """A tiny decoder with a byte-level BPE tokenizer (GPT-2's kind: 256 bytes + merges, <|endoftext|>)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator(_english_lines(300), trainers.BpeTrainer(
        vocab_size=330, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                  unk_token="<|endoftext|>")
    tok.save_pretrained(out)
    torch.manual_seed(0)
    ids = dict(vocab_size=len(tok), bos_token_id=0, eos_token_id=0, tie_word_embeddings=tied)
    if family == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(n_embd=64, n_layer=2, n_head=2, n_inner=128, n_positions=80, **ids))
    else:
        model = LlamaForCausalLM(LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                             num_key_value_heads=1, intermediate_size=128,
                                             max_position_embeddings=80, **ids))
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def extended_runs(tmp_path_factory, corpus_text):
    from data_tools.vocab_merge.extend import extend_vocab
    from data_tools.pipeline.run import prepare

    runs = {}

    def get(family: str, tied: bool, ds: str):
        key = (family, tied, ds)
        if key in runs:
            return runs[key]
        root = tmp_path_factory.mktemp(f"extend_{family}_{ds}")
        source = _source(root / "source", family, tied)
        english = root / "english.txt"
        english.write_text("\n".join(_english_lines(40, seed=1)) + "\n", encoding="utf-8")
        tokenizer = root / "tokenizer"
        extend_vocab(str(source), [corpus_text], tokenizer, add=60, english=[english])
        data = prepare([corpus_text], root / "data", hf_tokenizer=str(tokenizer), valid=0.1, test=0.05,
                       seed=0).parent
        cfg = base_config(root / "run", source, data, deepspeed=f"ds_configs/{ds}.json",
                          model={"source": str(source), "tokenizer": str(tokenizer), "method": "extend"})
        cfg["optim"]["weight_decay"] = 0.1
        cfg["phases"][0]["lr"] = 1e-2
        proc = launch(["--config", str(write_config(root / "cfg.yaml", cfg))], nproc=2)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[key] = (root, source, tokenizer, data)
        return runs[key]

    return get


CASES = [("gpt2", True, "zero2_fp32"), ("llama", False, "zero3_fp32")]


def _pairs(tied: bool, family: str) -> dict[str, str]:
    """Split parameter -> the source's matrix it holds rows of."""
    emb = "transformer.wte" if family == "gpt2" else "model.embed_tokens"
    out = {f"{emb}.old_rows": f"{emb}.weight"}
    if not tied:
        out["lm_head.old_rows"] = "lm_head.weight"
    return out


@pytest.mark.parametrize("family,tied,ds", CASES)
def test_phase1_leaves_every_old_row_exact_and_trains_the_new(family, tied, ds, extended_runs):
    root, source, tokenizer, _ = extended_runs(family, tied, ds)
    src = AutoModelForCausalLM.from_pretrained(source).state_dict()
    tag_dir = root / "run" / "checkpoints" / tag_for(4)  # the end of phase 1
    frozen = strip_prefix(read_frozen(tag_dir))
    V = src[next(iter(_pairs(tied, family).values()))].shape[0]
    for old, stock in _pairs(tied, family).items():
        assert torch.equal(frozen[old], src[stock][:V])  # bitwise, with weight decay 0.1 in the optimizer
    states = torch.load(min(tag_dir.glob("*mp_rank_00_model_states.pt")), map_location="cpu", weights_only=False)
    trainable = {k.removeprefix("hf."): s.numel() for group in states["param_shapes"] for k, s in group.items()}
    assert set(trainable) == {n.replace("old_rows", "new_rows") for n in _pairs(tied, family)}
    held = 0  # optimizer state over both ranks: the new rows' and nothing else (ZeRO pads to the world size)
    for rank in range(2):
        osd = torch.load(tag_dir / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt", weights_only=False)[
            "optimizer_state_dict"]
        flat = osd.get("single_partition_of_fp32_groups") or osd["fp32_flat_groups"]
        held += sum(t.numel() for t in flat)
        inner = osd.get("base_optimizer_state") or osd["optimizer_state_dict"]
        assert sum(s["exp_avg"].numel() for s in inner["state"].values()) == sum(t.numel() for t in flat)
    assert sum(trainable.values()) <= held <= sum(trainable.values()) + 2 * len(trainable)
    ends = load_checkpoint_fp32(root / "run" / "checkpoints", tag_for(4))
    emb = "transformer.wte" if family == "gpt2" else "model.embed_tokens"
    start = _start_rows(root, f"{emb}.new_rows")
    assert not torch.equal(ends[f"{emb}.new_rows"], start)  # the new rows trained
    after = load_checkpoint_fp32(root / "run" / "checkpoints", tag_for(8))  # phase 2: @all
    assert not torch.equal(after[f"{emb}.old_rows"], src[f"{emb}.weight"])


def _start_rows(root, name: str) -> torch.Tensor:
    """The value the run started ``name`` from: the same build plan, in this process."""
    from xpt_ds.config.manager import load_config
    from xpt_ds.data.tokenizer import tokenizer_for
    from xpt_ds.model.build import build_plan
    cfg = load_config(str(root / "cfg.yaml"))
    plan = build_plan(cfg.model, tokenizer_for(cfg.model), cfg.data)
    try:
        return plan.values(name)
    finally:
        plan.close()


@pytest.mark.parametrize("family,tied,ds", CASES)
def test_phase1_export_is_stock_and_keeps_the_source_on_english(family, tied, ds, extended_runs, tmp_path):
    from xpt_ds.export.hf import export
    root, source, tokenizer, data = extended_runs(family, tied, ds)
    out = tmp_path / "export"
    export(root / "run", out, tag=tag_for(4))
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    src_model = AutoModelForCausalLM.from_pretrained(source).eval()
    tok, src_tok = AutoTokenizer.from_pretrained(out), AutoTokenizer.from_pretrained(source)
    # the source's pieces, after the bos every training document started with (the source's tokenizer puts none)
    assert src_tok(ENGLISH).input_ids[0] != src_tok.bos_token_id
    assert tok(ENGLISH).input_ids == [src_tok.bos_token_id, *src_tok(ENGLISH).input_ids]
    ids = torch.tensor([[src_tok.bos_token_id, *src_tok(ENGLISH).input_ids]])
    with torch.no_grad():
        ours, theirs = model(ids).logits, src_model(ids).logits
    V = theirs.shape[-1]
    assert ours.shape[-1] == len(tok) > V
    assert torch.equal(ours[..., :V], theirs)  # the source's logits, bit for bit
    hangul = " ".join(json.loads((data / "sentences" / "test.jsonl").read_text(encoding="utf-8").splitlines()[0]))
    assert max(tok(hangul).input_ids) >= V  # the new pieces tokenize the target text
    prompt = tok(hangul[:20], return_tensors="pt").input_ids
    generated = model.generate(prompt, max_new_tokens=5, do_sample=False, pad_token_id=tok.pad_token_id)
    assert generated.shape[1] == prompt.shape[1] + 5
    _batched_generation_is_each_prompts(model, tok, [hangul[:4], ENGLISH, hangul[:20]])
    # xpt-ds evaluate on the shards, its samples decoded by the export's own (Hugging Face) tokenizer
    from xpt_ds.cli.evaluate import main as evaluate
    assert evaluate(["--model", str(out), "--shards", f"{data}/manifest.json:test", "--samples", "1",
                     "--out", str(tmp_path / "eval.json")]) == 0
    report = json.loads((tmp_path / "eval.json").read_text(encoding="utf-8"))
    prompt = report["samples"][0]["prompt"].rstrip("\ufffd")  # 8 pieces may end inside a character
    assert report["bits_per_byte"] > 0 and prompt and prompt in hangul_text(data)


def _batched_generation_is_each_prompts(model, tok, prompts: list[str]) -> None:
    """Prompts of different lengths generate in one padded batch what each does alone: the export pads on the
    left (the source's tokenizer padded on the right, which gave other continuations), up to the model's length."""
    assert tok.padding_side == "left" and tok.model_max_length <= model.config.xpt_max_length
    batch = tok(prompts, return_tensors="pt", padding=True)
    width = batch.input_ids.shape[1]
    with torch.no_grad():
        together = model.generate(**batch, max_new_tokens=4, do_sample=False)[:, width:]
        for i, prompt in enumerate(prompts):
            alone = tok(prompt, return_tensors="pt")
            n = alone.input_ids.shape[1]
            assert model.generate(**alone, max_new_tokens=4, do_sample=False)[0, n:].tolist() == together[i].tolist()


def hangul_text(data) -> str:
    """The test split's text, its documents' sentences joined as prepare read them."""
    docs = (data / "sentences" / "test.jsonl").read_text(encoding="utf-8").splitlines()
    return " ".join(" ".join(json.loads(d)) for d in docs)
