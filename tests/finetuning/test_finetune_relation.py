"""``xpt-ds finetune --task relation`` (KLUE-RE, 001): KLUE-RE's two metrics against hand-computed values, typed
entity markers on character offsets (Korean, Cyrillic, nested, object first; start markers before the space),
whole-word entities that keep the pieces of running text, windows that keep the markers, bad records as one
``error:`` line, and real fine-tuning on a task only the markers' types decide, on xpt_ds exports of every kind and
on a stock Hugging Face BERT, with the saved model reloaded by stock ``transformers``; and a decoder that reads the
end markers learning a task only the entities' words decide."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from xpt_ds.cli.finetune import main, parse_args
from saved_modes import assert_umask_modes
from xpt_ds.finetuning.config import FinetuneConfig
from xpt_ds.finetuning.data import FinetuneError
from xpt_ds.finetuning.metrics import pr_curve_area, relation_metrics
from xpt_ds.finetuning.relation import Entity, RelationExample, encode_relations, mark, read_relation_examples
from xpt_ds.finetuning.run import build_model, finetune, predict, prepare, score

FAST = dict(lr=2e-3, batch_size=16, epochs=4, warmup_ratio=0.1, weight_decay=0.01)
ENGLISH = ("the a of and to in is was for on with as by at from that this it be are or an were which city river "
           "house school music water world light stone garden winter summer north south old new small great early "
           "late people language history story").split()


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_thread):
    """Fine-tuning tiny models in-process: one intra-op thread (conftest.one_thread)."""


def record(sentence: str, subj: tuple[str, str], obj: tuple[str, str], label: str, subj_at: int | None = None,
           obj_at: int | None = None) -> dict:
    """A KLUE-RE record; an entity is (word, type) at its first occurrence unless ``*_at`` says where."""
    def entity(word: str, typ: str, at: int | None) -> dict:
        start = sentence.index(word) if at is None else at
        return {"word": word, "start_idx": start, "end_idx": start + len(word) - 1, "type": typ}
    return {"guid": "t", "sentence": sentence, "subject_entity": entity(*subj, subj_at),
            "object_entity": entity(*obj, obj_at), "label": label, "source": "test"}


def example(rec: dict) -> RelationExample:
    ents = [Entity(e["word"], e["start_idx"], e["end_idx"], e["type"])
            for e in (rec["subject_entity"], rec["object_entity"])]
    return RelationExample("x", rec["sentence"], *ents, rec["label"])


def write(path: Path, rows: list[dict], as_list: bool = False) -> Path:
    text = (json.dumps(rows, ensure_ascii=False, indent=1) if as_list
            else "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    path.write_text(text, encoding="utf-8")
    return path


def test_klue_re_metrics_by_hand():
    # ids: 0 no_relation, 1 org:member, 2 per:sibling
    gold = [0, 1, 1, 2, 0, 2]
    probs = [[.6, .3, .1], [.2, .7, .1], [.5, .4, .1], [.1, .2, .7], [.2, .1, .7], [.3, .5, .2]]
    # argmax 0 1 0 2 2 1. Without no_relation: predicted 4 (ids 1, 3, 4, 5), gold 4 (1, 2, 3, 5), right 2 (1, 3)
    m = relation_metrics(gold, probs, no_relation=0)
    assert m["micro_f1"] == pytest.approx(2 * 2 / (4 + 4)) and m["accuracy"] == pytest.approx(3 / 6)
    # One-vs-rest PR points (recall, precision), highest score first, ties together, from (0, 1):
    # class 0, scores .6+ .5 .3 .2(+,-) .1: (.5, 1) (.5, 1/2) (.5, 1/3) (1, 2/5) (1, 1/3) -> 1/2 + 1/2 (1/3 + 2/5)/2
    # class 1, scores .7+ .5 .4+ .3 .2 .1: (.5, 1) (.5, 1/2) (1, 2/3) ... -> 1/2 + 1/2 (1/2 + 2/3)/2
    # class 2, scores .7(+,-) .2+ .1(3x): (.5, 1/2) (1, 2/3) (1, 1/3) -> 1/2 (1 + 1/2)/2 + 1/2 (1/2 + 2/3)/2
    areas = [1 / 2 + (1 / 3 + 2 / 5) / 4, 1 / 2 + (1 / 2 + 2 / 3) / 4, (1 + 1 / 2) / 4 + (1 / 2 + 2 / 3) / 4]
    assert [pr_curve_area(np.array(gold) == c, np.array(probs)[:, c]) for c in range(3)] == pytest.approx(areas)
    assert m["auprc"] == pytest.approx(sum(areas) / 3)
    # Without a no_relation label every class counts: micro F1 is accuracy.
    assert relation_metrics(gold, probs, no_relation=None)["micro_f1"] == pytest.approx(3 / 6)
    # A class no gold example has (id 3) has no recall: left out of the average.
    wide = [row + [0.0] for row in probs]
    assert relation_metrics(gold, wide, no_relation=0)["auprc"] == pytest.approx(sum(areas) / 3)
    assert relation_metrics([1, 0], [[.1, .9], [.8, .2]], 0) == {"micro_f1": 1.0, "auprc": 1.0, "accuracy": 1.0}


@pytest.mark.parametrize("rec, marked", [
    (record("이순신은 조선 중기의 무신이다.", ("이순신", "PER"), ("무신", "POH"), "per:title"),
     "<subj:PER>이순신</subj:PER>은 조선 중기의<obj:POH> 무신</obj:POH>이다."),  # a start marker before the space
    # object first, at the very start; subject at the very end (Cyrillic: 2 bytes a character in UTF-8)
    (record("Київ — столиця України", ("України", "LOC"), ("Київ", "LOC"), "x"),
     "<obj:LOC>Київ</obj:LOC> — столиця<subj:LOC> України</subj:LOC>"),
    # object nested in the subject, same start: the longer span opens first
    (record("서울대학교 교수", ("서울대학교", "ORG"), ("서울", "LOC"), "x"),
     "<subj:ORG><obj:LOC>서울</obj:LOC>대학교</subj:ORG> 교수"),
    # subject nested in the object, same end: the inner one closes first
    (record("대한민국 서울", ("서울", "LOC"), ("대한민국 서울", "LOC"), "x"),
     "<obj:LOC>대한민국<subj:LOC> 서울</subj:LOC></obj:LOC>"),
    # two entities that start together move before the spaces together; not before the other's end marker
    (record("중기의 무신", ("무신", "PER"), ("무신", "PER"), "x"), "중기의<subj:PER><obj:PER> 무신</obj:PER></subj:PER>"),
    (record("x  A B", ("A B", "PER"), ("B", "PER"), "x"), "x<subj:PER>  A<obj:PER> B</obj:PER></subj:PER>"),
    (record("A B", ("A", "PER"), ("B", "PER"), "x"), "<subj:PER>A</subj:PER><obj:PER> B</obj:PER>"),
    # the same span twice: the subject outside
    (record("Пётр I", ("Пётр I", "PER"), ("Пётр I", "PER"), "x"),
     "<subj:PER><obj:PER>Пётр I</obj:PER></subj:PER>"),
    # adjacent spans: the first closes before the second opens
    (record("АБВГ", ("АБ", "ORG"), ("ВГ", "PER"), "x"), "<subj:ORG>АБ</subj:ORG><obj:PER>ВГ</obj:PER>"),
    # crossing spans: markers as the offsets say
    (record("abcdef", ("abcd", "ORG"), ("cdef", "ORG"), "x", obj_at=2),
     "<subj:ORG>ab<obj:ORG>cd</subj:ORG>ef</obj:ORG>"),
])
def test_markers_sit_on_character_offsets(rec, marked):
    assert mark(example(rec)) == marked


@pytest.fixture(scope="module")
def words(corpus_text) -> list[str]:
    """The synthetic Korean corpus's words, most frequent first (the XPT tokenizer knows them)."""
    counts: dict[str, int] = {}
    for w in corpus_text.read_text(encoding="utf-8").replace(".", " ").split():
        counts[w] = counts.get(w, 0) + 1
    return sorted(counts, key=lambda w: -counts[w])[:60]


def _export(method: str, source: Path, tokenizer: str, out: Path) -> Path:
    """What ``xpt-ds export`` writes for ``method`` (``save_model`` and the run's tokenizer), from freshly built
    weights: training changes values, not the directory's form."""
    from xpt_ds.config import ModelConfig
    from xpt_ds.data.tokenizer import copy_hf_tokenizer, save_hf_tokenizer, tokenizer_for
    from xpt_ds.model.build import build_model as build_xpt
    from xpt_ds.export.hf import save_model
    cfg = ModelConfig(source=str(source), tokenizer=tokenizer, method=method)
    tok = tokenizer_for(cfg)
    model = build_xpt(cfg, tok).model
    out.mkdir(parents=True)
    max_length, token_types = model.config.xpt_max_length, model.config.type_vocab_size
    save_model(model, out)
    if tok.kind == "huggingface":
        copy_hf_tokenizer(tok.path, out)
    else:
        save_hf_tokenizer(tok, out, model_max_length=max_length, token_types=token_types)
    return out


@pytest.fixture(scope="module")
def xpt_export(tmp_path_factory, tiny_roberta, corpus) -> Path:
    return _export("xpt", tiny_roberta, str(corpus / "spm.model"), tmp_path_factory.mktemp("rel") / "xpt")


@pytest.fixture(scope="module")
def stock_bert(tmp_path_factory) -> Path:
    """A stock BertForMaskedLM (2 layers, hidden 64) and its WordPiece tokenizer, as on the hub."""
    from conftest import TINY
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast
    out = tmp_path_factory.mktemp("stock_bert")
    vocab = STOCK_VOCAB
    BertTokenizerFast(vocab={p: i for i, p in enumerate(vocab)}, do_lower_case=True,
                      model_max_length=78).save_pretrained(out)
    torch.manual_seed(3)
    BertForMaskedLM(BertConfig(**{**TINY, "vocab_size": len(vocab)}, pad_token_id=0)).save_pretrained(out)
    return out


# WordPiece: English words, and single letters for the rest ("obj" -> o ##b ##j); no "<", ">" or ":".
STOCK_VOCAB = list(dict.fromkeys(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", *ENGLISH,
                                  *"abcdefghijklmnopqrstuvwxyz", *(f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz")]))
RULE = {("PER", "ORG"): "org:member", ("PER", "PER"): "per:sibling"}  # every other pair: no_relation
OTHER = [("ORG", "PER"), ("ORG", "ORG"), ("PER", "LOC"), ("LOC", "PER"), ("LOC", "ORG"), ("ORG", "LOC")]


def relation_rows(vocab: list[str], n: int, seed: int, join: str = " ") -> list[dict]:
    """Sentences of 4-9 ``vocab`` words; subject and object are two of them, in either order. The label is
    decided by the entity types alone (``RULE``), which only the typed markers carry; a third of each."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        pair = [("PER", "ORG"), ("PER", "PER"), OTHER[rng.integers(len(OTHER))]][rng.integers(3)]
        words = list(rng.choice(vocab, rng.integers(4, 10)))
        i, j = rng.choice(len(words), 2, replace=False)
        starts = np.cumsum([0] + [len(w) + len(join) for w in words[:-1]])
        sentence = join.join(words)
        rows.append(record(sentence, (words[i], pair[0]), (words[j], pair[1]), RULE.get(pair, "no_relation"),
                           subj_at=int(starts[i]), obj_at=int(starts[j])))
    return rows


def _files(rows: list[dict], root: Path) -> dict[str, str]:
    """train (60 %, a JSON list as KLUE-RE ships it), valid (15 %) and test (25 %, JSONL)."""
    n = len(rows)
    root.mkdir(parents=True, exist_ok=True)
    return {"train": str(write(root / "train.json", rows[:int(.6 * n)], as_list=True)),
            "valid": str(write(root / "valid.jsonl", rows[int(.6 * n):int(.75 * n)])),
            "test": str(write(root / "test.jsonl", rows[int(.75 * n):]))}


def _check_saved(out: Path, res: dict, cfg: FinetuneConfig):
    """Stock AutoTokenizer / AutoModel load OUT/model, the markers are single tokens, and the reloaded
    classifier scores the test set as the run did."""
    from transformers import AutoModel, AutoTokenizer

    from xpt_ds.finetuning.relation_model import load_relation_model
    saved = out / "model"
    assert_umask_modes(saved)
    tok = AutoTokenizer.from_pretrained(saved)
    for m in res["markers"]:
        assert tok.tokenize(m) == [m] and m in tok.get_added_vocab()
    encoder = AutoModel.from_pretrained(saved)
    assert encoder.get_input_embeddings().weight.shape[0] >= len(tok)
    model, meta = load_relation_model(saved)
    assert meta["labels"] == res["labels"] and meta["markers"] == res["markers"]
    prep = prepare(FinetuneConfig(**{**cfg.__dict__, "model": str(saved)}))
    assert len(prep.tokenizer) == len(tok)  # the markers are there already: nothing new added
    test = prep.splits["test"]
    probs = predict(model, test, "relation", tok.pad_token_id, 32, torch.device("cpu"))
    assert score("relation", test.gold, probs, prep.labels, "no_relation") == pytest.approx(res["seeds"][0]["test"])


@pytest.mark.parametrize("kind", ["xpt", "stock_bert", "xpt_decoder"])
def test_learns_relations_from_the_typed_markers(kind, request, words, tmp_path):
    """xpt_decoder: a trained Llama-layout export, which reads the end markers; they carry the types too."""
    model = request.getfixturevalue({"xpt": "xpt_export", "xpt_decoder": "xpt_decoder_model"}.get(kind, kind))
    rows = relation_rows(ENGLISH if kind == "stock_bert" else words, 400, seed=1)
    files = _files(rows, tmp_path / "data")
    cfg = FinetuneConfig(model=str(model), out=str(tmp_path / "out"), task="relation", seeds=[1], save_model=True,
                         **files, **FAST)
    res = finetune(cfg)
    assert res["labels"] == ["no_relation", "org:member", "per:sibling"]
    assert res["markers"] == ["<subj:LOC>", "</subj:LOC>", "<obj:LOC>", "</obj:LOC>", "<subj:ORG>", "</subj:ORG>",
                              "<obj:ORG>", "</obj:ORG>", "<subj:PER>", "</subj:PER>", "<obj:PER>", "</obj:PER>"]
    assert res["dropped"] == {"train": 0, "valid": 0, "test": 0} and res["sizes"]["test"] == 100
    test = res["seeds"][0]["test"]
    # chance: about a third each way; predicting no_relation always scores micro F1 0
    assert test["micro_f1"] > 0.9 and test["auprc"] > 0.9, test
    assert set(res["summary"]) == {"micro_f1", "auprc", "accuracy"} and res["summary"]["micro_f1"]["n"] == 1
    _check_saved(Path(cfg.out), res, cfg)
    read = json.loads((Path(cfg.out) / "model/relation.json").read_text())["classify_from"]
    assert read.endswith("end markers" if kind == "xpt_decoder" else "start markers"), read


def test_save_model_also_for_sentence_classification(stock_bert, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    f = write(tmp_path / "t.jsonl", [{"text": f"{w} city", "label": i % 2} for i, w in enumerate(ENGLISH[:16])])
    res = finetune(FinetuneConfig(model=str(stock_bert), train=str(f), test=str(f), out=str(tmp_path / "out"),
                                  seeds=[1], save_model=True, **{**FAST, "epochs": 1}))
    saved = tmp_path / "out/model"
    assert res["saved_model"] == str(saved)
    assert AutoModelForSequenceClassification.from_pretrained(saved).config.id2label == {0: "0", 1: "1"}
    assert AutoTokenizer.from_pretrained(saved).tokenize("city") == ["city"]
    assert_umask_modes(saved)


def test_marker_rows_start_from_their_pieces(stock_bert, tmp_path):
    """With an English vocabulary a marker's row is the mean of its text's known pieces; a grown matrix."""
    from transformers import AutoModel, AutoTokenizer

    from xpt_ds.finetuning.relation_model import add_marker_tokens, init_marker_rows
    tok = AutoTokenizer.from_pretrained(stock_bert)
    pieces = tok("<obj:PER>", add_special_tokens=False)["input_ids"]
    known = [p for p in pieces if p != tok.unk_token_id]
    assert known and len(known) < len(pieces)  # letters are known, "<", ":" and ">" are [UNK]
    rows = len(tok)
    got = add_marker_tokens(tok, ["<subj:PER>", "<obj:PER>"])
    assert got["<obj:PER>"] == known
    encoder = AutoModel.from_pretrained(stock_bert)
    before = encoder.get_input_embeddings().weight.detach().clone()
    init_marker_rows(encoder, tok, got)
    after = encoder.get_input_embeddings().weight
    assert after.shape[0] == rows + 2 and torch.equal(after[:rows], before)
    assert torch.allclose(after[rows + 1], before[known].mean(0))


def test_long_sentences_keep_their_markers_or_are_counted(xpt_export, words, tmp_path):
    from transformers import AutoTokenizer

    from xpt_ds.finetuning.relation_model import add_marker_tokens
    tok = AutoTokenizer.from_pretrained(xpt_export)
    add_marker_tokens(tok, ["<subj:PER>", "</subj:PER>", "<obj:ORG>", "</obj:ORG>"])
    filler = words[:40]
    sentence = " ".join(filler)
    at = [len(" ".join(filler[:i])) + (i > 0) for i in range(40)]  # a short word may occur inside a longer one
    middle = record(sentence, (filler[20], "PER"), (filler[22], "ORG"), "org:member", at[20], at[22])
    apart = record(sentence, (filler[0], "PER"), (filler[39], "ORG"), "org:member", at[0], at[39])
    enc = encode_relations([example(middle), example(apart)], [1, 1], tok, 16, False, "--test")
    assert enc.dropped == 1 and enc.kept == [0]
    feat = enc.features[0]
    ids = feat["input_ids"]
    assert len(ids) == 16 and ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
    tokens = tok.convert_ids_to_tokens(ids)
    assert tokens[feat["subject_pos"]] == "<subj:PER>" and tokens[feat["object_pos"]] == "<obj:ORG>"
    assert {"</subj:PER>", "</obj:ORG>"} <= set(tokens)
    causal = encode_relations([example(middle)], [1], tok, 16, False, "--test", causal=True).features[0]
    assert causal["input_ids"] == ids  # a decoder reads the end markers
    assert tokens[causal["subject_pos"]] == "</subj:PER>" and tokens[causal["object_pos"]] == "</obj:ORG>"
    # The same through prepare: counted per split, written to results.json
    files = {"train": str(write(tmp_path / "t.jsonl", [middle, {**apart, "label": "no_relation"}])),
             "test": str(write(tmp_path / "s.jsonl", [middle, middle]))}
    prep = prepare(FinetuneConfig(model=str(xpt_export), task="relation", max_length=16, **files))
    assert prep.dropped == {"train": 1, "test": 0} and len(prep.splits["train"].gold) == 1



@pytest.mark.parametrize("kind", ["sentencepiece", "byte_level"])
def test_whole_word_entities_keep_the_pieces_of_running_text(kind, xpt_export, words):
    """Markers around whole words leave every other piece as the sentence has it: an XPT export's SentencePiece
    tokenizer and a byte-level BPE one (GPT-2's, Llama 3's) give no space to text right after a special token, so
    a start marker goes before the space."""
    from transformers import AutoTokenizer

    from finetune_builders import byte_level_tokenizer
    from xpt_ds.finetuning.relation_model import add_marker_tokens
    sentence = " ".join(words[:8])
    tok = (AutoTokenizer.from_pretrained(xpt_export) if kind == "sentencepiece"
           else byte_level_tokenizer([sentence] * 20))
    add_marker_tokens(tok, ["<subj:PER>", "</subj:PER>", "<obj:ORG>", "</obj:ORG>"])
    at = [len(" ".join(words[:i])) + (i > 0) for i in range(8)]
    rec = record(sentence, (words[5], "PER"), (words[2], "ORG"), "x", at[5], at[2])
    ids = encode_relations([example(rec)], [0], tok, 64, False, "--test").features[0]["input_ids"]
    markers = set(tok.convert_tokens_to_ids(["<subj:PER>", "</subj:PER>", "<obj:ORG>", "</obj:ORG>"]))
    assert [i for i in ids if i not in markers] == tok(sentence)["input_ids"]


def test_a_decoder_reads_the_end_markers_and_learns_what_the_entities_are(xpt_decoder_model, words, tmp_path):
    """The label says which of two word sets the subject and the object come from (every marker of one type).
    A decoder's start marker has not seen its entity, so the later entity's set would be out of its reach; the end
    markers have seen both."""
    rng = np.random.default_rng(4)
    sets = {"a": words[:12], "b": words[12:24]}
    rows = []
    for _ in range(400):
        sentence = list(rng.choice(words[24:], rng.integers(3, 7)))
        kinds = [str(k) for k in rng.choice(["a", "b"], 2)]
        i, j = sorted(rng.choice(len(sentence) + 2, 2, replace=False))
        sentence[i:i] = [str(rng.choice(sets[kinds[0]]))]
        sentence[j:j] = [str(rng.choice(sets[kinds[1]]))]
        at = [len(" ".join(sentence[:k])) + (k > 0) for k in range(len(sentence))]
        first, second = (sentence[i], "W", at[i]), (sentence[j], "W", at[j])
        subj, obj = (first, second) if rng.random() < 0.5 else (second, first)
        label = {("a", "b"): "a:b", ("b", "a"): "b:a"}.get(tuple(kinds) if subj is first else tuple(kinds[::-1]),
                                                           "no_relation")
        rows.append(record(" ".join(sentence), subj[:2], obj[:2], label, subj_at=subj[2], obj_at=obj[2]))
    files = _files(rows, tmp_path / "data")
    res = finetune(FinetuneConfig(model=str(xpt_decoder_model), out=str(tmp_path / "out"), task="relation",
                                  seeds=[1], **files, **{**FAST, "epochs": 8}))
    assert res["seeds"][0]["test"]["micro_f1"] > 0.9, res["seeds"][0]

def _bad_cases(tmp: Path) -> list[tuple[Path, list[str]]]:
    good = record("김철수는 삼성에 다닌다.", ("김철수", "PER"), ("삼성", "ORG"), "per:employee_of")
    shifted = {**good, "subject_entity": {**good["subject_entity"], "start_idx": 1, "end_idx": 3}}
    outside = {**good, "object_entity": {**good["object_entity"], "end_idx": 99}}
    no_type = {**good, "object_entity": {k: v for k, v in good["object_entity"].items() if k != "type"}}
    no_subject = {k: v for k, v in good.items() if k != "subject_entity"}
    no_label = {k: v for k, v in good.items() if k != "label"}
    as_list = write(tmp / "shifted.json", [good, shifted], as_list=True)
    (tmp / "broken.jsonl").write_text(json.dumps(good, ensure_ascii=False) + "\n{\"sentence\": \n", encoding="utf-8")
    return [
        (as_list, ["shifted.json record 2", "subject_entity.word '김철수'", "sentence[1:3+1] = '철수는'"]),
        (write(tmp / "outside.jsonl", [good, outside]), ["outside.jsonl line 2", "object_entity offsets 5..99"]),
        (write(tmp / "no_type.jsonl", [no_type]), ["no_type.jsonl line 1", "'object_entity' has no 'type'"]),
        (write(tmp / "no_subject.jsonl", [good, good, no_subject]), ["line 3", "no field 'subject_entity'"]),
        (write(tmp / "no_label.jsonl", [no_label]), ["no_label.jsonl line 1", "no field 'label'"]),
        (tmp / "broken.jsonl", ["broken.jsonl line 2", "not valid JSON"]),
    ]


def test_bad_records_exit_2_with_one_line_naming_them(tmp_path, capsys):
    for path, needles in _bad_cases(tmp_path):
        assert main(["--model", str(tmp_path / "no_model"), "--task", "relation", "--train", str(path),
                     "--test", str(path)]) == 2, path
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: "), (path, err)
        for needle in needles:
            assert needle in err[0], (needle, err[0])
    good = tmp_path / "good.jsonl"
    write(good, [record("가 나", ("가", "PER"), ("나", "ORG"), "no_relation")])
    with pytest.raises(FinetuneError, match="only one label"):
        prepare(FinetuneConfig(model=str(tmp_path), task="relation", train=str(good), test=str(good)))
    examples = read_relation_examples(good, "--train")
    assert examples[0].subject == Entity("가", 0, 0, "PER") and examples[0].where == f"{good} line 1"


def test_klue_re_preset():
    cfg = parse_args(["--preset", "klue-re", "--model", "m"])
    assert (cfg.task, cfg.metric, cfg.batch_size, cfg.lr, cfg.epochs, cfg.warmup_ratio) == (
        "relation", "micro_f1", 32, 1e-5, 15, 0.1)


@pytest.mark.parametrize("method", ["adapters", "trelm", "keep_vocab"])
def test_every_export_kind_fine_tunes(method, tiny_roberta, corpus, corpus_bert, words, tmp_path):
    """The other export forms (remote code of our own, a kept source vocabulary) load, train one epoch and
    save; xpt is above."""
    from conftest import TINY
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast
    if method == "keep_vocab":
        source = tmp_path / "src"
        vocab = STOCK_VOCAB
        BertTokenizerFast(vocab={p: i for i, p in enumerate(vocab)}, model_max_length=78).save_pretrained(source)
        BertForMaskedLM(BertConfig(**{**TINY, "vocab_size": len(vocab)}, pad_token_id=0)).save_pretrained(source)
        model, text = _export(method, source, "", tmp_path / "export"), ENGLISH
    else:
        spm = str((corpus_bert if method == "trelm" else corpus) / "spm.model")
        if method == "trelm":
            from conftest import SOURCE_VOCAB
            source = tmp_path / "src"
            svocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *(f"w{i}" for i in range(5, SOURCE_VOCAB))]
            BertTokenizerFast(vocab={p: i for i, p in enumerate(svocab)}, model_max_length=78).save_pretrained(source)
            BertForMaskedLM(BertConfig(**{**TINY, "num_hidden_layers": 4, "vocab_size": SOURCE_VOCAB},
                                       pad_token_id=0)).save_pretrained(source)
        else:
            source = tiny_roberta
        model = _export(method, source, spm, tmp_path / "export")
        text = words
    files = _files(relation_rows(text, 40, seed=2), tmp_path / "data")
    cfg = FinetuneConfig(model=str(model), out=str(tmp_path / "out"), task="relation", seeds=[1], save_model=True,
                         **files, **{**FAST, "epochs": 1})
    res = finetune(cfg)
    kind = {"adapters": "XptAdapter", "trelm": "XptTreLM"}.get(method, "Bert")
    assert type(build_model(cfg, prepare(cfg)).encoder).__name__.startswith(kind)
    assert 0 <= res["seeds"][0]["test"]["micro_f1"] <= 1
    from xpt_ds.finetuning.relation_model import load_relation_model
    saved, _ = load_relation_model(Path(cfg.out) / "model")  # no flag: the code is xpt-ds's own, byte for byte
    assert type(saved.encoder).__name__.startswith(kind)  # the export's code travels with the saved model


def test_a_jsonl_sentence_holding_a_unicode_line_separator_is_one_record(tmp_path):
    """json.dumps(..., ensure_ascii=False) writes U+2028 and U+0085 raw inside a string: still one line of JSONL
    (newline-split, as the other readers do). str.splitlines() broke the record there: 'not valid JSON'."""
    sentence = "이순신은\u2028조선의\u0085무신이다."
    rec = {"sentence": sentence, "subject_entity": {"word": "이순신", "start_idx": 0, "end_idx": 2, "type": "PER"},
           "object_entity": {"word": "무신", "start_idx": 9, "end_idx": 10, "type": "POH"}, "label": "per:title"}
    path = tmp_path / "re.jsonl"
    path.write_text(json.dumps(rec, ensure_ascii=False) + "\r\n" + json.dumps(rec, ensure_ascii=False) + "\n",
                    encoding="utf-8")
    examples = read_relation_examples(path, "--train")
    assert len(examples) == 2 and all(ex.sentence == sentence for ex in examples)
