"""Manifests as the loader checks them: the tokenizer a manifest records, and each shard's document and token
counts and sha256, for shards named through ``MANIFEST.json:split`` and for shards named by path beside it."""
import json

import numpy as np
import pytest
from data_builders import data_config

from xpt_ds.config import ConfigError
from xpt_ds.data.manifest import expand_shards
from xpt_ds.data.mlm import build_stream
from xpt_ds.data.shards import DataError, scan_shard
from xpt_ds.data.tokenizer import build_tokenizer


def test_shards_named_by_path_are_checked_against_the_manifest_beside_them(tmp_path, corpus, corpus_bert):
    """A shard given by path (not MANIFEST:split) whose manifest beside it records another tokenizer fails as
    through the manifest; one with the same tokenizer, or with no manifest listing it, passes."""
    import shutil
    tok = build_tokenizer(str(corpus / "spm.model"))
    mine = json.loads((corpus / "manifest.json").read_text())["splits"]["test"]["shards"][0]
    other = json.loads((corpus_bert / "manifest.json").read_text())["splits"]["test"]["shards"][0]
    assert expand_shards([str(corpus / mine)], tok) == [str(corpus / mine)]
    with pytest.raises(ConfigError, match=f"manifest {corpus_bert / 'manifest.json'} (has vocab_size|was tokenized)"):
        expand_shards([str(corpus_bert / other)], tok)
    shutil.copy(corpus_bert / other, tmp_path / other)  # no manifest lists it: nothing to check it against
    assert expand_shards([str(tmp_path / other)], tok) == [str(tmp_path / other)]


def test_a_shard_named_by_path_is_checked_against_what_the_manifest_beside_it_records(tmp_path, corpus):
    """Given by path or brace pattern, a shard its manifest lists gets the manifest's counts and sha256, as through
    MANIFEST:split (and the tokenizer check already): a changed byte is found; a copy no manifest lists is not."""
    import shutil
    from xpt_ds.data.manifest import manifest_counts
    data = tmp_path / "corpus"
    shutil.copytree(corpus, data)
    tok = build_tokenizer(str(data / "spm.model"))
    through = manifest_counts([f"{data}/manifest.json:train", f"{data}/manifest.json:valid"])
    names = json.loads((data / "manifest.json").read_text())["splits"]["train"]["shards"]
    first = str(data / names[0])
    pattern = str(data / names[0]).replace("000000", "{000000..000001}")  # the first and a shard not made
    assert manifest_counts([first, str(data / names[-1])]) == {p: through[p] for p in (first, str(data / names[-1]))}
    assert manifest_counts([pattern]) == {first: through[first]} and through[first][2]
    shutil.copy(first, tmp_path / "copy.tar")
    assert manifest_counts([str(tmp_path / "copy.tar")]) == {}
    idx = scan_shard(first)
    with open(first, "r+b") as f:  # document 0's first id becomes another ordinary id
        f.seek(int(idx.offsets[0]))
        was = int(np.frombuffer(f.read(2), np.uint16)[0])
        f.seek(int(idx.offsets[0]))
        f.write(np.array([10 if was != 10 else 11], np.uint16).tobytes())
    with pytest.raises(DataError, match=f"corrupt shard {first}: its sha256 is not the {through[first][2][:12]}"):
        build_stream(expand_shards([first], tok), data_config([first]), tok, expected=manifest_counts([first]))


def test_a_byte_changed_inside_a_manifest_shard_is_found_by_its_sha256(tmp_path, corpus):
    """A changed id that stays in the vocabulary and is no special id passes every other check (counts, tar, ids):
    the manifest's per-shard sha256 finds it; a manifest written before it (no shard_sha256) cannot."""
    import shutil
    from xpt_ds.data.manifest import manifest_counts
    from xpt_ds.io.digest import sha256_file
    data = tmp_path / "corpus"
    shutil.copytree(corpus, data)
    tok = build_tokenizer(str(data / "spm.model"))
    spec = [f"{data}/manifest.json:train"]
    manifest = json.loads((data / "manifest.json").read_text())
    entry = manifest["splits"]["train"]
    assert entry["shard_sha256"] == [sha256_file(data / s) for s in entry["shards"]]
    shards = expand_shards(spec, tok)
    idx = scan_shard(shards[0])
    with open(shards[0], "r+b") as f:  # document 0's first id becomes another ordinary id
        f.seek(int(idx.offsets[0]))
        first = int(np.frombuffer(f.read(2), np.uint16)[0])
        f.seek(int(idx.offsets[0]))
        f.write(np.array([10 if first != 10 else 11], np.uint16).tobytes())
    with pytest.raises(DataError) as e:
        build_stream(shards, data_config(shards), tok, expected=manifest_counts(spec))
    assert str(e.value).startswith(f"corrupt shard {shards[0]}: its sha256 is not the {entry['shard_sha256'][0][:12]}")
    both = [*spec, f"{data}/manifest.json:valid"]
    stream = build_stream(expand_shards(both, tok), data_config(shards, on_corrupt_shard="skip"), tok,
                          expected=manifest_counts(both))
    assert stream.skipped == [shards[0]] and len(stream.indexes) == len(expand_shards(both, tok)) - 1
    del entry["shard_sha256"]  # as prepare wrote manifests before 2026-11-28
    (data / "manifest.json").write_text(json.dumps(manifest))
    assert build_stream(shards, data_config(shards), tok, expected=manifest_counts(spec)).skipped == []
    entry["shard_sha256"] = ["0" * 64] * (len(entry["shards"]) + 1)  # not one per shard
    (data / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ConfigError, match=r"manifest .*manifest.json: splits.train.shard_sha256 must list one sha256"):
        manifest_counts(spec)


@pytest.mark.parametrize("damage, says", [
    (lambda m: m.write_text(m.read_text()[:40]), "not valid JSON (Expecting"),
    (lambda m: m.write_bytes(b"\xff\xfe" + m.read_bytes()), "not valid JSON ('utf-8' codec"),
    (lambda m: m.write_text("[1, 2]"), "not a shard manifest (no 'splits' object)"),
    (lambda m: m.write_text(json.dumps({**json.loads(m.read_text()), "splits": []})), "no 'splits' object"),
    (lambda m: m.write_text(json.dumps(_edit(json.loads(m.read_text()), "shards", None))),
     "splits.train.shards must be a list of shard file names"),
    (lambda m: m.write_text(json.dumps(_edit(json.loads(m.read_text()), "shard_documents", []))),
     "splits.train.shard_documents must list one count per shard"),
])
def test_a_damaged_manifest_is_one_line_naming_it(tmp_path, corpus, damage, says):
    """Every reader of a manifest (the shard list, the per-shard counts) stops at a damaged one with a ConfigError
    naming the file and what is wrong, never a JSON, Key or Type error."""
    import shutil
    from xpt_ds.data.manifest import manifest_counts
    data = tmp_path / "corpus"
    shutil.copytree(corpus, data)
    damage(data / "manifest.json")
    from xpt_ds.data.parallel import KEY, expand_parallel_shards, parallel_digests
    spec = f"{data}/manifest.json:train"
    for read, start in ((lambda: expand_shards([spec]), ""), (lambda: manifest_counts([spec]), ""),
                        (lambda: expand_parallel_shards([spec], None, None), f"{KEY}: "),
                        (lambda: parallel_digests([spec]), f"{KEY}: ")):
        with pytest.raises(ConfigError) as e:
            read()
        assert str(e.value).startswith(f"{start}manifest {data / 'manifest.json'}: ") and says in str(e.value)
        assert "\n" not in str(e.value)


def _edit(meta: dict, key: str, value) -> dict:
    """``meta`` with the train split's ``key`` set to ``value`` (None: removed)."""
    meta["splits"]["train"].pop(key, None)
    if value is not None:
        meta["splits"]["train"][key] = value
    return meta
