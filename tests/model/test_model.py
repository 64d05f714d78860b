import pytest
import torch
from transformers import AutoModelForMaskedLM

from xpt_ds.config import DataConfig, ModelConfig, TrainConfig, PhaseConfig
from xpt_ds.model.build import build_model
from xpt_ds.model.phases import build_phase_trainables
from xpt_ds.data.tokenizer import build_tokenizer


def _build(source, corpus, **kw):
    cfg = ModelConfig(source=str(source), tokenizer=str(corpus / "spm.model"), **kw)
    tok = build_tokenizer(cfg.tokenizer)
    return build_model(cfg, tok), tok, AutoModelForMaskedLM.from_pretrained(source)


def count_params(model):
    return sum(p.numel() for p in model.parameters())


def _sd(module):
    return {k: v for k, v in module.state_dict().items()}


def _equal(a, b):
    sa, sb = _sd(a), _sd(b)
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("family", ["roberta", "bert"])
def test_xpt_reuses_source_bit_exactly(family, tiny_roberta, tiny_bert, corpus, corpus_bert):
    source, corp = (tiny_roberta, corpus) if family == "roberta" else (tiny_bert, corpus_bert)
    built, tok, src = _build(source, corp)
    tb, sb = getattr(built.model, family), getattr(src, family)
    C = src.config.num_hidden_layers
    assert len(tb.encoder.layer) == C + 2
    for i in range(C):
        assert _equal(tb.encoder.layer[i + 1], sb.encoder.layer[i]), f"layer {i}"
    for name in ("position_embeddings", "token_type_embeddings", "LayerNorm"):
        assert _equal(getattr(tb.embeddings, name), getattr(sb.embeddings, name)), name
    head = ("lm_head.dense", "lm_head.layer_norm") if family == "roberta" else (
        "cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm")
    for path in head:
        assert _equal(built.model.get_submodule(path), src.get_submodule(path)), path
    # New parts: embeddings with the target vocab, ITLs unlike any source layer, decoder tied to embeddings.
    assert tb.embeddings.word_embeddings.weight.shape == (tok.vocab_size, src.config.hidden_size)
    for itl in (tb.encoder.layer[0], tb.encoder.layer[C + 1]):
        assert not any(_equal(itl, sb.encoder.layer[i]) for i in range(C))
    assert built.model.get_output_embeddings().weight is tb.embeddings.word_embeddings.weight


def test_every_supported_family_has_adapter_classes():
    """xpt_ds/model/methods/adapters.py is copied into exports, so it keeps its own family table; it must cover
    model.py's."""
    import xpt_ds.model.methods.adapters as adapters
    from xpt_ds.model.build import FAMILIES
    assert set(adapters.FAMILIES) == set(FAMILIES)
    for family in FAMILIES:
        for cls in adapters.auto_map(family).values():
            assert hasattr(adapters, cls.split(".")[1]), cls


def test_parameter_count(tiny_roberta, corpus):
    built, tok, src = _build(tiny_roberta, corpus)
    d = src.config.hidden_size
    layer = sum(p.numel() for p in src.roberta.encoder.layer[0].parameters())
    vocab_delta = (tok.vocab_size - src.config.vocab_size) * (d + 1)  # embedding rows + LM-head bias
    assert count_params(built.model) == count_params(src) + 2 * layer + vocab_delta


def test_roberta_positions_follow_source_rows_when_pad_differs(tiny_roberta, corpus_bert):
    """Target pad id 0 vs source pad id 1: every real token must still use the source's position row."""
    built, tok, src = _build(tiny_roberta, corpus_bert)
    assert tok.pad_id != src.config.pad_token_id
    ids_t = torch.tensor([[tok.cls_id, 10, 11, 12, 13, tok.sep_id, tok.pad_id, tok.pad_id]])
    ids_s = torch.where(ids_t == tok.pad_id, src.config.pad_token_id, torch.full_like(ids_t, 5))
    emb_t, emb_s = built.model.roberta.embeddings, src.roberta.embeddings
    pos_t = emb_t.create_position_ids_from_input_ids(ids_t, emb_t.padding_idx)
    pos_s = emb_s.create_position_ids_from_input_ids(ids_s, emb_s.padding_idx)
    real = ids_t != tok.pad_id
    assert torch.equal(emb_t.position_embeddings(pos_t)[real], emb_s.position_embeddings(pos_s)[real])
    assert built.model.config.xpt_max_length == src.config.max_position_embeddings - 2


def test_methods_shapes_and_tags(tiny_roberta, corpus):
    no_itl, _, src = _build(tiny_roberta, corpus, method="xpt_no_itl")
    assert len(no_itl.model.roberta.encoder.layer) == 2
    assert _equal(no_itl.model.roberta.encoder.layer[0], src.roberta.encoder.layer[0])
    scratch, _, _ = _build(tiny_roberta, corpus, method="scratch")
    assert len(scratch.model.roberta.encoder.layer) == 4
    assert all("@new" in t for t in scratch.tags.values())
    rand, _, _ = _build(tiny_roberta, corpus, method="random_source")
    assert not _equal(rand.model.roberta.encoder.layer[1], src.roberta.encoder.layer[0])
    copy, _, _ = _build(tiny_roberta, corpus, itl_init="copy")
    assert _equal(copy.model.roberta.encoder.layer[0], src.roberta.encoder.layer[0])
    assert _equal(copy.model.roberta.encoder.layer[3], src.roberta.encoder.layer[1])


def test_adapters_start_as_identity(tiny_roberta, corpus):
    adapters, _, _ = _build(tiny_roberta, corpus, method="adapters", adapter_size=8)
    plain, _, _ = _build(tiny_roberta, corpus, method="xpt_no_itl")
    names = [n for n in adapters.tags if ".adapter." in n]
    assert len(names) == 2 * 2 * 4  # 2 layers x 2 adapters x (down, up) x (weight, bias)
    assert all("@adapters" in adapters.tags[n] and "@new" in adapters.tags[n] for n in names)
    missing = adapters.model.load_state_dict(plain.model.state_dict(), strict=False).missing_keys
    assert sorted(missing) == sorted(names)
    ids = torch.randint(5, 100, (2, 12))
    adapters.model.eval(), plain.model.eval()
    assert torch.allclose(adapters.model(ids).logits, plain.model(ids).logits, atol=1e-6)


def test_phase_presets(tiny_roberta, corpus):
    built, _, _ = _build(tiny_roberta, corpus)
    cfg = TrainConfig(model=ModelConfig(source="x", tokenizer="y"),
                      phases=[PhaseConfig(name="a", steps=1), PhaseConfig(name="b", steps=1)])
    p1, p2 = build_phase_trainables(cfg, built.tags)
    assert p2 == set(built.tags)
    assert p1 == {n for n, t in built.tags.items() if "@new" in t}
    assert "roberta.embeddings.word_embeddings.weight" in p1 and "lm_head.bias" in p1
    assert all(n.startswith(("roberta.encoder.layer.0.", "roberta.encoder.layer.3.", "roberta.embeddings.word",
                             "lm_head.bias")) for n in p1)
    cfg.model.phase1_trains_position_and_head = True
    p1_extra, _ = build_phase_trainables(cfg, built.tags)
    assert p1_extra - p1 == {"roberta.embeddings.position_embeddings.weight", "lm_head.dense.weight",
                             "lm_head.dense.bias", "lm_head.layer_norm.weight", "lm_head.layer_norm.bias"}


def test_source_without_mlm_head_marks_head_new(tmp_path, tiny_bert, corpus_bert):
    """A BertModel checkpoint (like all-MiniLM-L6-v2) has no MLM head: it starts fresh and trains in phase 1."""
    from transformers import BertModel
    BertModel.from_pretrained(tiny_bert).save_pretrained(tmp_path)
    built, _, _ = _build(tmp_path, corpus_bert)
    assert "@new" in built.tags["cls.predictions.transform.dense.weight"]
    assert "@source" in built.tags["bert.encoder.layer.1.attention.self.query.weight"]


def _skeleton_takes_every_value(model):
    """A resume, a phase hand-over, an export and evaluate fill a skeleton that has no values at all (parameters
    on the meta device, no initialiser run) with every weight. Nothing may stay as the skeleton left it: not a
    parameter (none on the meta device once assigned), not a buffer (position ids, rotary frequencies: the
    constructors' values, which an init would have written again), not a tied head (still one tensor)."""
    from xpt_ds.model.skeleton import assign, skeleton
    params = dict(model.named_parameters())
    twin = skeleton(model.config)
    assert all(p.device.type == "meta" for p in twin.parameters())
    assign(twin, lambda n: params[n].detach().clone())
    want, got = model.state_dict(), twin.state_dict()
    assert want.keys() == got.keys()
    assert [k for k in want if not torch.equal(want[k], got[k])] == []
    assert type(twin) is type(model)
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert (twin.get_output_embeddings().weight is twin.get_input_embeddings().weight) == tied


SKELETON_KINDS = [("roberta", "xpt"), ("bert", "xpt"), ("roberta", "adapters"), ("bert", "scratch"),
                  ("gpt2-tied", "xpt"), ("llama-untied", "xpt"), ("mistral-untied", "xpt"), ("qwen2-tied", "xpt"),
                  ("llama-untied", "lora"), ("roberta", "trelm")]


@pytest.mark.parametrize("source,method", SKELETON_KINDS, ids=[f"{s}-{m}" for s, m in SKELETON_KINDS])
def test_a_skeleton_takes_every_value_it_is_given(source, method, tiny_roberta, tiny_bert, tiny_decoder, corpus,
                                                  corpus_bert):
    family, _, tied = source.partition("-")
    path = {"roberta": tiny_roberta, "bert": tiny_bert}.get(family) or tiny_decoder(family, tied == "tied")
    corp = corpus_bert if family == "bert" else corpus
    cfg = ModelConfig(source=str(path), tokenizer=str(corp / "spm.model"), method=method,
                      **({"adapter_size": 8} if method == "adapters" else {}))
    built = build_model(cfg, build_tokenizer(cfg.tokenizer), DataConfig(train_shards=[f"{corp}/manifest.json:train"]))
    _skeleton_takes_every_value(built.model)


PLANNED_KINDS = SKELETON_KINDS + [("roberta", "xpt_no_itl"), ("gpt2-tied", "scratch")]
# keep_vocab needs a source with its tokenizer files: tests/model/test_keep_vocab.py trains it, through this check


@pytest.mark.parametrize("source,method", PLANNED_KINDS, ids=[f"{s}-{m}" for s, m in PLANNED_KINDS])
def test_planned_tags_are_the_built_models_from_its_config_alone(source, method, tiny_roberta, tiny_bert,
                                                                  tiny_decoder, corpus, corpus_bert, tmp_path):
    """The trainer checks phase patterns against ``planned_tags`` before any source weight is read: the same
    parameter names as the built model, each with every tag it has there (plus @source/@new, which depends on the
    source's files), made on the meta device from a copy of the source without its weights."""
    import shutil

    from xpt_ds.data.tokenizer import tokenizer_for
    from xpt_ds.model.build import planned_tags, planned_target
    family, _, tied = source.partition("-")
    path = {"roberta": tiny_roberta, "bert": tiny_bert}.get(family) or tiny_decoder(family, tied == "tied")
    corp = corpus_bert if family == "bert" else corpus
    cfg = ModelConfig(source=str(path), tokenizer=str(corp / "spm.model"), method=method)
    tok = tokenizer_for(cfg)
    built = build_model(cfg, tok, DataConfig(train_shards=[f"{corp}/manifest.json:train"]))
    weightless = tmp_path / "weightless"
    shutil.copytree(path, weightless, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    planned_cfg = ModelConfig(source=str(weightless), tokenizer=cfg.tokenizer, method=method)
    planned = planned_tags(planned_cfg, *planned_target(planned_cfg, tok))
    assert planned.keys() == built.tags.keys()
    assert [n for n, t in built.tags.items() if not t <= planned[n] or planned[n] - t - {"@source", "@new"}] == []


def test_a_pattern_that_matches_nothing_is_found_before_the_source_weights(tiny_roberta, corpus, tmp_path):
    from xpt_ds.config import ConfigError
    from xpt_ds.model.build import planned_tags, planned_target
    from xpt_ds.model.phases import check_patterns
    cfg = ModelConfig(source=str(tiny_roberta), tokenizer=str(corpus / "spm.model"), method="xpt")
    tags = planned_tags(cfg, *planned_target(cfg, build_tokenizer(cfg.tokenizer)))
    good = TrainConfig(model=cfg, phases=[PhaseConfig(name="a", steps=1), PhaseConfig(
        name="b", steps=1, trainable=["@all", "!@itl", r"roberta\.encoder\.layer\.1\..*"])])
    check_patterns(good, tags)
    for patterns, culprit in ((["@al"], "'@al'"), (["@all", "!roberta.nope.*"], "'roberta.nope.*'")):
        bad = TrainConfig(model=cfg, phases=[PhaseConfig(name="a", steps=1, trainable=patterns)])
        with pytest.raises(ConfigError, match=f"phases\\[0\\].trainable.*{culprit}.*matches no parameter"):
            check_patterns(bad, tags)
