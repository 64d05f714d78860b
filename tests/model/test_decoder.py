"""Decoder sources (xpt_ds.model.decoder, xpt_ds.model.forward.causal_lm, xpt_ds.data.causal), in process: tiny
GPT-2 and Llama built as stock L+2-layer models with the reused layers copied bit for bit, tied and untied heads, the
method switch, one-line errors, next-token rows with position restarts and no attention across documents, and
the chunked loss equal to the plain one in value and gradient."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    GPT2LMHeadModel,
    LlamaForCausalLM,
)

from xpt_ds.config import ConfigError, DataConfig, ModelConfig
from xpt_ds.data.mlm import build_streams
from xpt_ds.data.tokenizer import build_tokenizer
from conftest import twin_of
from xpt_ds.model.build import build_model
from xpt_ds.model.skeleton import assign, skeleton
from xpt_ds.model.forward.causal_lm import CausalLMObjective
from xpt_ds.model.forward.objective import build_objective

KINDS = [("gpt2", True), ("gpt2", False), ("llama", True), ("llama", False)]
LAYERS = {"gpt2": lambda m: m.transformer.h, "llama": lambda m: m.model.layers}


def _build(source, corpus, method="xpt", **model):
    tok = build_tokenizer(str(corpus / "spm.model"))
    cfg = ModelConfig(source=str(source), tokenizer=str(corpus / "spm.model"), method=method, **model)
    return build_model(cfg, tok, DataConfig(train_shards=[f"{corpus}/manifest.json:train"])), tok


@pytest.mark.parametrize("family,tied", KINDS, ids=[f"{f}-{'tied' if t else 'untied'}" for f, t in KINDS])
def test_xpt_target_is_a_stock_model_with_the_source_layers_inside(family, tied, tiny_decoder, corpus):
    source = tiny_decoder(family, tied)
    built, tok = _build(source, corpus)
    model, src = built.model, (GPT2LMHeadModel if family == "gpt2" else LlamaForCausalLM).from_pretrained(source)
    assert type(model) is type(src) and model.config.num_hidden_layers == 4
    assert model.config.vocab_size == tok.vocab_size == model.get_input_embeddings().weight.shape[0]
    assert (model.get_output_embeddings().weight is model.get_input_embeddings().weight) == tied
    layers = LAYERS[family](model)
    attention = [layer.attn if family == "gpt2" else layer.self_attn for layer in layers]
    assert [a.layer_idx for a in attention] == [0, 1, 2, 3]  # KV-cache slots of the L+2-layer stock model
    for i, layer in enumerate(LAYERS[family](src)):  # reused layers bit for bit, one index later
        for (name, p), (_, q) in zip(layer.state_dict().items(), layers[i + 1].state_dict().items()):
            assert torch.equal(p, q), (i, name)
    new = {n for n, t in built.tags.items() if "@new" in t}
    itl = {n for n, t in built.tags.items() if "@itl" in t}
    expected = {n for n, _ in model.named_parameters() if ".0." in n or ".3." in n or "embed" in n or "wte" in n}
    assert itl and itl <= new and new == expected | (set() if tied else {"lm_head.weight"})
    assert built.embedding_init["strategy"] == "random" and ("output_rows" in built.embedding_init) == (not tied)
    # The same module tree as the HF config builds (what a phase switch and export rebuild from).
    twin = twin_of(model).eval()
    model.eval()
    ids = torch.randint(5, tok.vocab_size, (2, 12))
    with torch.no_grad():
        assert torch.equal(twin(ids).logits, model(ids).logits)


@pytest.mark.parametrize("method,layers,new_groups", [("xpt_no_itl", 2, {"@embeddings"}),
                                                      ("xpt_sp", 4, {"@embeddings", "@itl"}),
                                                      ("scratch", 4, None)])
def test_other_methods(method, layers, new_groups, tiny_decoder, corpus):
    built, _ = _build(tiny_decoder("llama", True), corpus, method)
    assert built.model.config.num_hidden_layers == layers
    new = {g for t in built.tags.values() if "@new" in t for g in t} - {"@all", "@new"}
    if new_groups is None:  # scratch: nothing copied
        assert all("@new" in t for t in built.tags.values())
    else:
        assert new == new_groups


def test_untied_output_rows_run_the_strategy_on_the_source_head(gpt2_shifted_head, corpus):
    """source_mean on both matrices: the output rows are drawn from the source head's statistics (its mean is 0.5
    away from the input matrix's), the input rows from the input matrix's."""
    source = gpt2_shifted_head
    src = GPT2LMHeadModel.from_pretrained(source)
    built, tok = _build(source, corpus, embedding_init="source_mean")
    report = built.embedding_init
    assert report["fallback"] == report["output_rows"]["fallback"] == tok.vocab_size - 1  # all but pad
    model = built.model
    assert not torch.equal(model.lm_head.weight, model.transformer.wte.weight)
    # source_mean draws from N(mean, cov) of each matrix: the means follow their own source matrix
    for got, ref in ((model.transformer.wte.weight, src.transformer.wte.weight), (model.lm_head.weight,
                                                                                  src.lm_head.weight)):
        assert torch.allclose(got[5:].mean(0), ref.mean(0), atol=0.02)


def test_bad_sources_and_methods_are_one_line_errors(tiny_decoder, corpus, tmp_path):
    with pytest.raises(ConfigError, match=r"model.method': 'adapters' is not available for a decoder source \(gpt2\)"):
        _build(tiny_decoder("gpt2", True), corpus, "adapters")
    from transformers import GPTNeoXConfig
    GPTNeoXConfig(vocab_size=120, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=128).save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match="model_type 'gpt_neox' is not supported") as e:
        _build(tmp_path, corpus)
    assert "\n" not in str(e.value) and "gpt2, llama" in str(e.value)
    with pytest.raises(ConfigError, match=r"model.source': GGUF file not found: .*/missing.gguf$"):
        _build(tmp_path / "missing.gguf", corpus)


def test_next_token_rows(tiny_decoder, corpus):
    """Targets are the next pieces, never the row's appended sep; a document boundary (sep) is predicted, then read
    as cls at position 0; with position restarts a document's logits do not depend on the one before it."""
    tok = build_tokenizer(str(corpus / "spm.model"))
    data = DataConfig(train_shards=[f"{corpus}/manifest.json:train"], seq_len=64, num_workers=0)
    train, _ = build_streams(data, tok, 4, 0, 1, causal=True)
    batch = next(train)
    raw = train.stream.tokens(0, 4 * 62)  # the stream the four rows hold
    ids, pos = batch["input_ids"], batch["position_ids"]
    assert set(batch) == {"input_ids", "position_ids", "mlm_positions", "mlm_targets", "seq_ids"}
    assert len(batch["mlm_positions"]) == 4 * 62  # T - 2 per row: position 62 would predict the appended sep
    rows = torch.from_numpy(raw).view(4, 62)
    assert torch.equal(batch["mlm_targets"].view(4, 62), rows)
    seps = rows == tok.sep_id
    assert seps.any() and torch.equal(ids[:, 1:63] == tok.cls_id, seps) and (ids[:, 0] == tok.cls_id).all()
    assert (pos[:, 1:63][seps] == 0).all() and (pos[:, 0] == 0).all()

    # Logits of the second document in a row equal those of the document alone (cls at position 0).
    b, start = next((b, int(c)) for b in range(4) for c in seps[b].nonzero().squeeze(1))
    start += 1  # row index of the cls that opens the next document
    end = start + 1 + int(torch.cat([(pos[b, start + 1:] == 0).nonzero().squeeze(1), torch.tensor([63 - start])])[0])
    model = build_model(ModelConfig(source=str(tiny_decoder("llama", False)), tokenizer=tok.path), tok).model.eval()
    with torch.no_grad():
        packed = model(input_ids=ids[b:b + 1], position_ids=pos[b:b + 1], use_cache=False).logits[0, start:end]
        alone = model(input_ids=ids[b:b + 1, start:end], use_cache=False).logits[0]
        joined = model(input_ids=ids[b:b + 1], use_cache=False).logits[0, start:end]  # attending across: differs
    assert end - start > 3 and torch.allclose(packed, alone, atol=1e-5) and not torch.allclose(joined, alone, atol=1e-3)

    # The stream's state is the MLM stream's: one integer, and a reloaded stream continues with the same batch.
    state = train.state_dict()
    nxt = next(train)
    again, _ = build_streams(data, tok, 4, 0, 1, causal=True)
    again.load_state_dict(state)
    assert all(torch.equal(nxt[k], v) for k, v in next(again).items())


def test_chunked_loss_equals_the_plain_one(tiny_decoder, corpus):
    tok = build_tokenizer(str(corpus / "spm.model"))
    model = build_model(ModelConfig(source=str(tiny_decoder("gpt2", False, 0.0)), tokenizer=tok.path), tok).model
    data = DataConfig(train_shards=[f"{corpus}/manifest.json:train"], seq_len=32, num_workers=0)
    batch = {k: v for k, v in next(build_streams(data, tok, 3, 0, 1, causal=True)[0]).items() if k != "seq_ids"}
    assert isinstance(build_objective(model), CausalLMObjective)
    grads, losses = [], []
    for chunk_elements in (10 ** 9, 7 * tok.vocab_size):  # one chunk; 14 chunks of 7 positions (90 predicted)
        objective = CausalLMObjective(model, chunk_elements)
        model.zero_grad()
        loss = objective(**batch)
        loss.backward()
        losses.append(loss.detach())
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    hidden = model.transformer(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).last_hidden_state
    plain = torch.nn.functional.cross_entropy(model.lm_head(hidden.flatten(0, 1)[batch["mlm_positions"]]),
                                              batch["mlm_targets"])
    assert torch.allclose(losses[0], plain, atol=1e-6) and torch.allclose(losses[1], plain, atol=1e-6)
    for n in grads[0]:
        assert torch.allclose(grads[0][n], grads[1][n], atol=1e-6), n


def test_validation_scores_a_decoder_in_the_loss_chunks(tiny_decoder, corpus):
    """``score``: validation's and evaluate's metrics come from the loss's chunks of logits, never the
    micro-batch's [M, V] at once (14 parts of at most 7 positions here), and equal those of the whole [M, V]."""
    from xpt_ds.metrics.mlm import MLMStats
    tok = build_tokenizer(str(corpus / "spm.model"))
    model = build_model(ModelConfig(source=str(tiny_decoder("gpt2", False, 0.0)), tokenizer=tok.path), tok).model
    data = DataConfig(train_shards=[f"{corpus}/manifest.json:train"], seq_len=32, num_workers=0)
    batch = {k: v for k, v in next(build_streams(data, tok, 3, 0, 1, causal=True)[0]).items() if k != "seq_ids"}
    objective = CausalLMObjective(model.eval(), 7 * tok.vocab_size)
    whole, parts, sizes = MLMStats(), MLMStats(), []

    def score(logits, targets):
        sizes.append(logits.shape[0])
        parts.update(logits, targets)
    with torch.no_grad():
        whole.update(objective(**batch, return_logits=True), batch["mlm_targets"])
        assert objective(**batch, score=score).item() == 0
    assert len(sizes) == 14 and max(sizes) <= 7 and sum(sizes) == batch["mlm_targets"].numel() == 90
    got, want = parts.result(), whole.result()
    assert got.keys() == want.keys() and got["tokens"] == want["tokens"]
    assert all(got[k] == pytest.approx(want[k], rel=1e-6) for k in want)

@pytest.mark.parametrize("family", ["gemma2", "gemma3_text", "qwen3", "phi3"])
def test_the_objective_scores_the_stock_models_own_logits(family, tiny_decoder, corpus):
    """The objective's logits and loss are the stock *ForCausalLM's, on packed rows with position restarts:
    Gemma2's final logits softcapped at 30 as its forward caps them (the head alone would not be), its attention
    (softcapped at 50) eager as the stock model's default."""
    tok = build_tokenizer(str(corpus / "spm.model"))
    model = build_model(ModelConfig(source=str(tiny_decoder(family, True, 0.0)), tokenizer=tok.path), tok).model
    model.eval()
    assert model.config._attn_implementation == ("eager" if family == "gemma2" else "sdpa")
    data = DataConfig(train_shards=[f"{corpus}/manifest.json:train"], seq_len=32, num_workers=0)
    batch = {k: v for k, v in next(build_streams(data, tok, 3, 0, 1, causal=True)[0]).items() if k != "seq_ids"}
    objective = build_objective(model)
    with torch.no_grad():
        stock = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits
        want = stock.flatten(0, 1)[batch["mlm_positions"]]
        assert torch.allclose(objective(**batch, return_logits=True), want, atol=1e-5)
        loss = torch.nn.functional.cross_entropy(want, batch["mlm_targets"])
        assert torch.allclose(objective(**batch), loss, atol=1e-5)
    if family == "gemma2":
        assert stock.abs().max() < 30 and model.config.final_logit_softcapping == 30.0
        uncapped = model.lm_head(model.model(input_ids=batch["input_ids"],
                                             position_ids=batch["position_ids"]).last_hidden_state)
        assert not torch.allclose(uncapped, stock, atol=1e-5)  # the cap changes the logits: the check means something


@pytest.fixture(scope="module")
def gpt2_with_tokenizer(tmp_path_factory, corpus_text):
    """An untied GPT-2 source with a byte-level BPE tokenizer trained on the corpus's own text (so pieces overlap)
    and GPT-2's one special token."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2TokenizerFast
    out = tmp_path_factory.mktemp("gpt2_bpe")
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(corpus_text.read_text(encoding="utf-8").splitlines(), vocab_size=400, min_frequency=2,
                            show_progress=False, special_tokens=["<|endoftext|>"])
    bpe.save_model(str(out))
    tok = GPT2TokenizerFast(vocab=str(out / "vocab.json"), merges=str(out / "merges.txt"))
    tok.save_pretrained(out)
    torch.manual_seed(3)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=64, n_layer=2, n_head=2, n_positions=80,
                               tie_word_embeddings=False)).save_pretrained(out)
    return out


@pytest.mark.parametrize("strategy", ["overlap_copy", "frequency_rank"])
def test_strategies_fill_input_and_output_rows_from_their_own_matrix(strategy, gpt2_with_tokenizer, corpus):
    """Each copied input row is source input row j, and the same target id's output row is source output row j;
    cls and sep take GPT-2's bos/eos (<|endoftext|>), as unk does."""
    src = GPT2LMHeadModel.from_pretrained(gpt2_with_tokenizer)
    built, tok = _build(gpt2_with_tokenizer, corpus, embedding_init=strategy)
    report, model = built.embedding_init, built.model
    assert report["copied"] > 10 and report["special"] == 3 and report["output_rows"]["copied"] == report["copied"]
    wte, head = src.transformer.wte.weight, src.lm_head.weight
    matched = 0
    for i in range(tok.vocab_size):
        hits = (model.transformer.wte.weight[i] == wte).all(1).nonzero().squeeze(1)
        if len(hits):
            matched += 1
            assert torch.equal(model.lm_head.weight[i], head[hits[0]]), i
    assert matched == report["copied"] + report["special"]
    eot = wte[0]  # <|endoftext|>, the trained BPE's only special token
    assert torch.equal(model.transformer.wte.weight[tok.cls_id], eot)
    assert torch.equal(model.transformer.wte.weight[tok.sep_id], eot)


def _write(prefix, matrix: np.ndarray, tokenizer: dict, **meta):
    from data_tools.embeddings.embedding_files import write_embeddings
    return write_embeddings(prefix, matrix, {"kind": meta.pop("kind", "static"), "tokenizer": tokenizer, **meta})


def _spm_identity(corpus) -> dict:
    from data_tools.piece_tokenizers import SpmTokenizer
    return SpmTokenizer(corpus / "spm.model").identity()


def _source_rows(source):
    src = GPT2LMHeadModel.from_pretrained(source)
    return src.transformer.wte.weight.detach(), src.lm_head.weight.detach()


def test_focus_fills_input_and_output_rows_from_their_own_matrix(gpt2_with_tokenizer, corpus, tmp_path):
    """FOCUS's known answer on both matrices of an untied GPT-2: static vectors one-hot per target piece, except
    that a non-overlapping piece t has the vector of an overlapping piece a, so sparsemax over its cosines
    [1, 0, ...] is one-hot: t's input row is a's source input row, t's output row a's source output row. Another
    non-overlapping piece u is orthogonal to every anchor: the mean of the anchors' rows, of each matrix."""
    from xpt_ds.embedding_init.context import InitContext
    from xpt_ds.embedding_init.strategies import overlap
    wte, head = _source_rows(gpt2_with_tokenizer)
    tok = build_tokenizer(str(corpus / "spm.model"))
    V, special = tok.vocab_size, set(tok.special_ids)
    shared = {i: sid for i, (sid, _) in overlap(InitContext(tok, wte, str(gpt2_with_tokenizer), torch.Generator(),
                                                            0.02, {})).items()}
    others = [i for i in range(V) if i not in shared and i not in special]
    assert len(shared) > 10 and len(others) > 10
    t, u, a = others[0], others[1], sorted(shared)[3]
    static = np.eye(V, dtype=np.float32)
    static[t] = static[a]
    path = _write(tmp_path / "static", static, _spm_identity(corpus), method="fasttext", unseen_ids=sorted(special))
    built, _ = _build(gpt2_with_tokenizer, corpus, embedding_init="focus", embedding_init_args={"static": str(path)})
    report, model = built.embedding_init, built.model
    inp, out = model.transformer.wte.weight.detach(), model.lm_head.weight.detach()
    for r in (report, report["output_rows"]):
        assert (r["strategy"], r["copied"], r["combined"], r["special"]) == ("focus", len(shared), len(others), 3)
    for i, j in shared.items():  # overlapping pieces copy, each matrix from its own source matrix
        assert torch.equal(inp[i], wte[j]) and torch.equal(out[i], head[j]), i
    assert torch.equal(inp[t], wte[shared[a]]) and torch.equal(out[t], head[shared[a]])
    anchors = [shared[i] for i in sorted(shared)]
    assert torch.allclose(inp[u].double(), wte[anchors].double().mean(0), atol=1e-6)
    assert torch.allclose(out[u].double(), head[anchors].double().mean(0), atol=1e-6)
    assert not torch.allclose(out[u], inp[u], atol=1e-3)
    for i in (tok.cls_id, tok.sep_id):  # GPT-2's <|endoftext|> (id 0) in both matrices
        assert torch.equal(inp[i], wte[0]) and torch.equal(out[i], head[0])
    assert not inp[tok.pad_id].any() and not out[tok.pad_id].any()


@pytest.fixture(scope="module")
def gpt2_shifted_head(tmp_path_factory, gpt2_with_tokenizer):
    """``gpt2_with_tokenizer`` with 0.5 added to its output head: the two matrices' statistics differ."""
    import shutil
    out = tmp_path_factory.mktemp("gpt2_shifted")
    for f in gpt2_with_tokenizer.iterdir():
        shutil.copy(f, out)
    model = GPT2LMHeadModel.from_pretrained(gpt2_with_tokenizer)
    with torch.no_grad():
        model.lm_head.weight.add_(0.5)
    model.save_pretrained(out)
    return out


def test_aligned_fills_input_and_output_rows_with_the_same_weights(gpt2_shifted_head, corpus, tmp_path):
    """WECHSEL's known answer on both matrices: source static vectors one-hot per source token, target piece t
    mapped onto token x's: t's weights are softmax([1, 0, ...] / 0.1) over x and the next 9 candidates (ties by
    id), applied to the source input rows for t's input row and to the source output rows for its output row;
    pieces without a vector fall back to draws from each matrix's own mean and covariance."""
    from transformers import AutoTokenizer

    from data_tools.piece_tokenizers import HfTokenizer
    wte, head = _source_rows(gpt2_shifted_head)
    stok = AutoTokenizer.from_pretrained(gpt2_shifted_head)
    tok = build_tokenizer(str(corpus / "spm.model"))
    Vs, V = len(stok), tok.vocab_size
    x, t = 50, 20
    hf = HfTokenizer(gpt2_shifted_head).identity()
    src_path = _write(tmp_path / "src", np.eye(Vs, dtype=np.float32), hf, unseen_ids=[])
    tgt = np.zeros((V, Vs), np.float32)
    tgt[t, x] = 1.0
    tgt_path = _write(tmp_path / "tgt", tgt, _spm_identity(corpus), kind="procrustes", source_tokenizer=hf,
                      unseen_ids=[i for i in range(V) if i != t])
    built, _ = _build(gpt2_shifted_head, corpus, embedding_init="aligned",
                      embedding_init_args={"target": str(tgt_path), "source": str(src_path)})
    report, model = built.embedding_init, built.model
    inp, out = model.transformer.wte.weight.detach(), model.lm_head.weight.detach()
    cands = [j for j in range(Vs) if j != x and j not in stok.all_special_ids][:9]
    w = torch.softmax(torch.tensor([10.0] + [0.0] * 9, dtype=torch.float64), 0)
    assert torch.allclose(inp[t], (w @ wte[[x, *cands]].double()).float(), rtol=0, atol=1e-7)
    assert torch.allclose(out[t], (w @ head[[x, *cands]].double()).float(), rtol=0, atol=1e-7)
    assert not torch.allclose(out[t], inp[t], atol=1e-3)
    for r in (report, report["output_rows"]):  # t; cls, sep, unk from <|endoftext|>; pad; the rest fall back
        assert (r["strategy"], r["combined"], r["special"], r["fallback"]) == ("aligned", 1, 3, V - 5)
    fallback = [i for i in range(5, V) if i != t]
    for got, ref in ((inp, wte), (out, head)):  # draws from N(mean, cov) of each matrix (the head's mean is 0.5)
        assert torch.allclose(got[fallback].mean(0), ref.mean(0), atol=0.03)


@pytest.mark.parametrize("family,tied", [("gpt2", False), ("llama", True)], ids=["gpt2-untied", "llama-tied"])
def test_from_file_fills_input_rows_and_an_untied_head_with_the_files_rows(family, tied, tiny_decoder,
                                                                          gpt2_with_tokenizer, corpus, tmp_path):
    """The file's rows are over the target ids in one space: they start the input rows and, for an untied head,
    the output rows too (the same values; the head stays a parameter of its own)."""
    source = gpt2_with_tokenizer if family == "gpt2" else tiny_decoder(family, tied)
    tok = build_tokenizer(str(corpus / "spm.model"))
    rows = np.random.default_rng(0).normal(size=(tok.vocab_size, 64)).astype(np.float32)
    path = _write(tmp_path / "rows", rows, _spm_identity(corpus), kind="input-embeddings")
    built, _ = _build(source, corpus, embedding_init="from_file", embedding_init_args={"path": str(path)})
    model, report = built.model, built.embedding_init
    rows[tok.pad_id] = 0
    inp, out = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    assert torch.equal(inp, torch.from_numpy(rows)) and torch.equal(out, torch.from_numpy(rows))
    assert (out is inp) == tied and ("output_rows" in report) == (not tied)
    assert all(r["copied"] == tok.vocab_size - 1 for r in (report, report.get("output_rows", report)))


class _SkipLayer(nn.Module):
    """A decoder layer that passes its input on (what the Llama-layout stack reads of a layer: its output, and
    for Gemma2/3 its attention kind, which picks its mask and rope)."""

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.attention_type = getattr(layer, "attention_type", None)

    def forward(self, hidden_states, *args, **kwargs):
        return hidden_states


LLAMA_LAYOUT_KINDS = [("mistral", False), ("qwen2", True), ("qwen3", False), ("olmo2", True), ("gemma", True),
                      ("gemma2", True), ("gemma3_text", False), ("phi3", False)]


@pytest.mark.parametrize("family,tied", LLAMA_LAYOUT_KINDS, ids=[f"{f}-{'tied' if t else 'untied'}"
                                                                 for f, t in LLAMA_LAYOUT_KINDS])
def test_llama_layout_families_build_in_llamas_layout(family, tied, tiny_decoder, corpus, tmp_path):
    """Stock L+2-layer MistralForCausalLM, Qwen2/Qwen3ForCausalLM, Olmo2ForCausalLM, Gemma/Gemma2/Gemma3ForCausalLM,
    Phi3ForCausalLM: the source layers and final norm bit for bit one index later, tags as Llama's, a layer_types list
    (Qwen2's [full, sliding], Gemma2's [sliding, full], Gemma3's [sliding, full]) widened with its first and last kind
    (and kept through the saved config, which export and phase switches rebuild from). With the ITLs skipped, the
    target's stack computes the source's hidden states exactly, on a sequence longer than the 4-position sliding
    window (a reused layer in a slot of the other attention kind would not)."""
    source = tiny_decoder(family, tied, 0.0)
    built, tok = _build(source, corpus)
    model = built.model.eval()
    # the source on the target's attention kernel (Gemma2: eager, which transformers 5.17 does not pick by itself)
    src = AutoModelForCausalLM.from_pretrained(source, attn_implementation=model.config._attn_implementation).eval()
    assert type(model) is type(src) and model.config.model_type == family and model.config.num_hidden_layers == 4
    assert (model.get_output_embeddings().weight is model.get_input_embeddings().weight) == tied
    layers = model.model.layers
    assert [layer.self_attn.layer_idx for layer in layers] == [0, 1, 2, 3]
    for i, layer in enumerate(src.model.layers):
        for (name, p), (_, q) in zip(layer.state_dict().items(), layers[i + 1].state_dict().items()):
            assert torch.equal(p, q), (i, name)
    assert torch.equal(model.model.norm.weight, src.model.norm.weight)
    tags = built.tags
    new = {n for n, t in tags.items() if "@new" in t}
    assert new == {n for n in tags if ".0." in n or ".3." in n or "embed_tokens" in n} | (
        set() if tied else {"lm_head.weight"})
    assert {n for n, t in tags.items() if "@decoder" in t} == {n for n in tags if ".1." in n or ".2." in n}
    assert {n for n, t in tags.items() if "@lm_head" in t} == {"model.norm.weight"}
    kinds = getattr(src.config, "layer_types", None)
    if family in ("qwen2", "gemma2", "gemma3_text"):
        assert len(set(kinds)) == 2, kinds  # a source with both kinds of attention
    if kinds is not None:
        assert model.config.layer_types == [kinds[0], *kinds, kinds[-1]]
    model.config.save_pretrained(tmp_path)
    params = dict(model.named_parameters())
    twin = assign(skeleton(AutoConfig.from_pretrained(tmp_path)), lambda n: params[n].detach().clone()).eval()
    assert getattr(twin.config, "layer_types", None) == getattr(model.config, "layer_types", None)
    ids = torch.randint(5, tok.vocab_size, (2, 12))
    with torch.no_grad():
        assert torch.equal(twin(ids).logits, model(ids).logits)
        embeds = torch.randn(2, 12, 64, generator=torch.Generator().manual_seed(0))
        layers[0], layers[3] = _SkipLayer(layers[0]), _SkipLayer(layers[3])
        assert torch.equal(model.model(inputs_embeds=embeds).last_hidden_state,
                           src.model(inputs_embeds=embeds).last_hidden_state)


def test_the_source_config_is_read_once_until_its_file_changes(tiny_decoder, tmp_path, monkeypatch):
    """model.source's config is parsed once per process (from a GGUF file that takes seconds; the trainer asks
    for it more than once: check_source, the build), handed out as a copy, and read again once its file changes."""
    import json
    import shutil

    import transformers

    from xpt_ds.model.build import source_config
    source = shutil.copytree(tiny_decoder("llama", False, 0.0), tmp_path / "source")
    reads = []
    real = transformers.AutoConfig.from_pretrained.__func__
    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained",
                        classmethod(lambda cls, *a, **k: reads.append(a) or real(cls, *a, **k)))
    cfg = ModelConfig(source=str(source), tokenizer="unused")
    first, second = source_config(cfg), source_config(cfg)
    assert len(reads) == 1 and first is not second and first.to_dict() == second.to_dict()
    first.num_hidden_layers = 99  # a caller's change stays its own
    assert source_config(cfg).num_hidden_layers == second.num_hidden_layers != 99
    config = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 3}, indent=1))
    assert source_config(cfg).num_hidden_layers == 3 and len(reads) == 2


def test_a_config_json_is_a_causal_lm_by_its_family_or_its_architecture():
    """``is_causal_lm`` of a config.json dict: a family built here by its model_type alone (a config written
    without ``architectures``), any other by a ``*ForCausalLM`` / ``*LMHeadModel`` architecture; encoders are not."""
    from xpt_ds.model.decoder import is_causal_lm
    assert is_causal_lm({"model_type": "llama"}) and is_causal_lm({"model_type": "gpt2"})
    assert is_causal_lm({"model_type": "falcon", "architectures": ["FalconForCausalLM"]})
    assert not is_causal_lm({"model_type": "roberta", "architectures": ["RobertaForMaskedLM"]})
    assert not is_causal_lm({"model_type": "bert"})
