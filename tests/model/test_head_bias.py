"""model.head_bias_init: the MLM head's bias starts as the unigram predictor's logits, or at zero (the default)."""
import pytest
import torch

from xpt_ds.config import ConfigError, DataConfig, ModelConfig, TrainConfig, from_dict, validate
from xpt_ds.data.tokenizer import build_tokenizer
from xpt_ds.evaluation.intrinsic import UnigramPredictor
from xpt_ds.model.build import build_model


def _bias(built) -> torch.Tensor:
    return dict(built.model.named_parameters())[built.family.head_bias].detach()


@pytest.mark.parametrize("source", ["tiny_roberta", "tiny_bert"])
def test_unigram_bias_is_the_unigram_predictor(request, source, corpus, corpus_bert):
    corpus = corpus if source == "tiny_roberta" else corpus_bert
    tok = build_tokenizer(str(corpus / "spm.model"))
    data = DataConfig(train_shards=[f"{corpus}/manifest.json:train"])
    cfg = ModelConfig(source=str(request.getfixturevalue(source)), tokenizer=tok.path, head_bias_init="unigram")
    built = build_model(cfg, tok, data)
    bias = _bias(built)
    assert torch.isfinite(bias).all()
    unigram = UnigramPredictor.from_shards(data.train_shards, tok).log_p
    targets = torch.isfinite(unigram)  # the pieces that can be masked targets
    # Over the pieces that can be targets, softmax(bias) is the unigram predictor: the model starts from it.
    assert torch.allclose(torch.log_softmax(bias[targets], 0), unigram[targets], atol=1e-5)
    assert built.embedding_init["head_bias"].startswith("unigram")
    # The default leaves the stock start (zero), and a rebuild of the unigram start gives the same bits.
    assert not _bias(build_model(ModelConfig(source=cfg.source, tokenizer=tok.path), tok, data)).any()
    assert torch.equal(_bias(build_model(cfg, tok, data)), bias)


def test_unigram_bias_needs_a_new_vocabulary_and_a_head_bias(tiny_roberta, tiny_decoder, corpus):
    tok = build_tokenizer(str(corpus / "spm.model"))
    with pytest.raises(ConfigError, match="model.head_bias_init.*keep_vocab"):
        validate(from_dict(TrainConfig, {"model": {"source": str(tiny_roberta), "method": "keep_vocab",
                                      "head_bias_init": "unigram"}, "phases": [{"name": "a", "steps": 1, "lr": 1e-3}],
                            "data": {"train_shards": ["x"]}}))
    with pytest.raises(ConfigError, match="model.head_bias_init.*valid: zero, unigram"):
        validate(from_dict(TrainConfig, {"model": {"source": str(tiny_roberta), "tokenizer": tok.path,
                                                   "head_bias_init": "ones"},
                                         "phases": [{"name": "a", "steps": 1, "lr": 1e-3}],
                                         "data": {"train_shards": ["x"]}}))
    data = DataConfig(train_shards=[f"{corpus}/manifest.json:train"])
    with pytest.raises(ConfigError, match="no LM-head bias"):
        build_model(ModelConfig(source=str(tiny_decoder("llama", True)), tokenizer=tok.path,
                                head_bias_init="unigram"), tok, data)
    with pytest.raises(ConfigError, match="data.train_shards"):
        build_model(ModelConfig(source=str(tiny_roberta), tokenizer=tok.path, head_bias_init="unigram"), tok)


def test_a_subset_of_the_train_split_counts_only_its_own_pieces(corpus):
    """data.train_tokens (a sweep's size): the head bias and the frequency-based embedding starts count the pieces
    of the documents the run trains on, the last one cut where the stream cuts it, not the whole split (until
    2026-12-04 a sweep's smallest size started from the statistics of its largest)."""
    import numpy as np

    from xpt_ds.data.manifest import expand_shards
    from xpt_ds.data.mlm import build_stream
    from xpt_ds.embedding_init.context import count_pieces
    tok = build_tokenizer(str(corpus / "spm.model"))
    spec = [f"{corpus}/manifest.json:train"]
    whole = count_pieces(spec, tok)[0]
    data = DataConfig(train_shards=spec, train_tokens=int(whole.sum()) // 3)
    counts, documents, _ = count_pieces(spec, tok, data=data)
    # what the stream trains on in an epoch, less the separator it puts after each document
    stream = build_stream(expand_shards(spec, tok), data, tok, data.train_tokens)
    seen = np.bincount(stream.tokens(0, stream.epoch_tokens), minlength=tok.vocab_size)
    seen[tok.sep_id] -= documents * stream.sep
    assert documents == len(stream.epoch_docs) and np.array_equal(counts, seen)
    assert counts.sum() < whole.sum() and (counts <= whole).all()
    assert np.array_equal(count_pieces(spec, tok, data=DataConfig(train_shards=spec))[0], whole)
