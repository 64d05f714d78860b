"""The phase graph (004 §3.3, Alg. 1): branches that start from an earlier phase's end (start_from) and a phase
that starts from a merge of branch ends, with the xpt method on the tiny model.

The runs use a source with dropout off, so two branches that start from the same weights on the same batches
have the same first loss; the language-specific phase trains only the ITLs, so every other weight in the final
checkpoint is what the merge made."""
import json
import shutil

import pytest
import torch
import yaml
from transformers import RobertaConfig, RobertaForMaskedLM

from conftest import REPO, TINY, base_config, launch, read_metrics, read_phase_end, write_config
from xpt_ds.export.hf import load_checkpoint_fp32
from xpt_ds.checkpoint.phase_ends import PHASE_ENDS, load_phase_end
from xpt_ds.checkpoint.store import read_client_state
from xpt_ds.checkpoint.tags import CheckpointError, complete_tags, tag_for
from xpt_ds.config import ConfigError, load_config
from xpt_ds.model.build import FAMILIES, _tag_parameters
from xpt_ds.model.forward.objective import strip_prefix
from xpt_ds.model.phases import build_phase_starts, build_phase_trainables, value_from_ends

MERGE = {"take": {"@lower": "x_to_en", "@upper": "en_to_x"}, "average": ["en_to_x", "x_to_en"]}
PHASES = [  # 2 steps each: global steps 1-2, 3-4, 5-6, 7-8
    {"name": "common", "steps": 2, "lr": 1e-3, "warmup_steps": 1, "trainable": ["@new"]},
    {"name": "en_to_x", "steps": 2, "lr": 1e-3, "warmup_steps": 1, "start_from": "common",
     "trainable": ["@all", "!@lower"]},
    {"name": "x_to_en", "steps": 2, "lr": 1e-3, "warmup_steps": 1, "start_from": "common",
     "trainable": ["@all", "!@upper"]},
    {"name": "lang", "steps": 2, "lr": 1e-3, "warmup_steps": 1, "trainable": ["@itl"], "merge": MERGE},
]
STEPS = 8
LOWER, UPPER, ITL = ("roberta.encoder.layer.1.", "roberta.encoder.layer.2.",
                     ("roberta.encoder.layer.0.", "roberta.encoder.layer.3."))


def _config(tmp_path, phases, **sections) -> str:
    data = {"model": {"source": "roberta-base", "tokenizer": "spm.model"}, "phases": phases,
            "data": {"train_shards": ["train-000000.tar"]}, **sections}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize("change, message", [
    ({2: {"start_from": "nope"}}, "'phases[2].start_from' is 'nope', which is no phase's name"),
    ({1: {"start_from": "x_to_en"}}, "'phases[1].start_from' is 'x_to_en', which is not an earlier phase"),
    ({1: {"start_from": "en_to_x"}}, "'phases[1].start_from' is 'en_to_x', which is not an earlier phase"),
    ({3: {"start_from": "common"}}, "'phases[3]' sets both start_from and merge"),
    ({3: {"merge": {"take": {"@lower": "lang"}}}}, "'phases[3].merge.take.@lower' is 'lang', which is not an earlier"),
    ({3: {"merge": {"take": {"@lower": 3}}}}, "'phases[3].merge.take.@lower' is 3, which is no phase's name"),
    ({3: {"merge": {"average": ["common", "common"]}}}, "'phases[3].merge.average' names a phase twice"),
    ({3: {"merge": {"average": ["common", "later"]}}}, "'phases[3].merge.average[1]' is 'later', which is no phase"),
    ({3: {"merge": {"tkae": {}}}}, "unknown config key 'phases[3].merge.tkae'"),
    ({3: {"steps": 0}}, "'phases[3].steps' must be > 0"),
    ({0: {"name": "com/mon"}, 1: {"start_from": "com/mon"}, 2: {"start_from": "com/mon"}},
     "'phases[0].name' is 'com/mon'; a phase that another starts from names a file"),
])
def test_config_errors_name_the_key(tmp_path, change, message):
    phases = [dict(p) for p in PHASES]
    for i, fields in change.items():
        phases[i].update(fields)
    with pytest.raises(ConfigError) as info:
        load_config(_config(tmp_path, phases))
    assert message in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_a_valid_graph_parses_and_round_trips(tmp_path):
    cfg = load_config(_config(tmp_path, PHASES))
    assert [p.reads() for p in cfg.phases] == [[], ["common"], ["common"], ["x_to_en", "en_to_x"]]
    assert cfg.phases[3].merge.take == MERGE["take"] and cfg.phases[0].merges is False
    assert load_config(_config(tmp_path, [{"name": "a", "steps": 1}])).phases[0].merge.average == []


def _tags(layers: int, has_itl: bool) -> dict[str, set[str]]:
    model = RobertaForMaskedLM(RobertaConfig(**{**TINY, "num_hidden_layers": layers + 2 * has_itl}, pad_token_id=1))
    return _tag_parameters(model, FAMILIES["roberta"], set(), layers, has_itl)


@pytest.mark.parametrize("layers, has_itl, lower, upper", [
    (2, True, [1], [2]), (3, True, [1], [2, 3]), (3, False, [0], [1, 2]), (4, False, [0, 1], [2, 3])])
def test_lower_and_upper_halves_are_the_source_layers(layers, has_itl, lower, upper):
    tags = _tags(layers, has_itl)

    def layers_of(group):
        return sorted({int(n.split(".")[3]) for n, t in tags.items() if group in t})
    assert (layers_of("@lower"), layers_of("@upper")) == (lower, upper)
    assert not any({"@lower", "@upper"} & t for t in tags.values() if "@itl" in t or "@embeddings" in t)


def test_merge_plan_errors_name_the_key(tmp_path):
    tags = _tags(2, True)
    cfg = load_config(_config(tmp_path, PHASES))

    def error(merge):
        cfg.phases[3].merge.take, cfg.phases[3].merge.average = merge.get("take", {}), merge.get("average", [])
        with pytest.raises(ConfigError) as info:
            build_phase_starts(cfg, tags)
        return str(info.value)
    assert "'phases[3].merge.take': patterns '@lower' and 'roberta\\.encoder\\.layer\\.1\\..*' both take" in error(
        {"take": {"@lower": "x_to_en", r"roberta\.encoder\.layer\.1\..*": "en_to_x"}, "average": ["common"]})
    assert "'phases[3].merge.average' is empty but" in error({"take": {"@lower": "x_to_en", "@upper": "en_to_x"}})
    assert "pattern '@nothing' matches no parameter" in error({"take": {"@nothing": "common"}, "average": ["common"]})
    assert "'phases[3].merge.take': pattern '!@lower' selects no parameter" in error(
        {"take": {"!@lower": "common"}, "average": ["common"]})
    cfg.phases[1].trainable = ["@lower", "!@lower"]
    with pytest.raises(ConfigError, match=r"'phases\[1\].trainable' leaves no parameter to train"):
        build_phase_trainables(cfg, tags)


def test_merge_takes_halves_and_averages_the_rest(tmp_path):
    tags = _tags(2, True)
    sources = build_phase_starts(load_config(_config(tmp_path, PHASES)), tags)
    assert sources[0] is None and set(sources[1].values()) == {("common",)}
    gen = torch.Generator().manual_seed(0)
    ends = {p: {n: torch.randn(3, generator=gen) for n in tags} for p in ("en_to_x", "x_to_en")}
    merged = {n: value_from_ends(sources[3], {p: v.__getitem__ for p, v in ends.items()}, n) for n in sources[3]}
    assert merged.keys() == tags.keys()
    for n, t in tags.items():
        want = (ends["x_to_en"][n] if "@lower" in t else ends["en_to_x"][n] if "@upper" in t else
                (ends["en_to_x"][n] + ends["x_to_en"][n]) / 2)
        assert torch.equal(merged[n], want), n


@pytest.fixture(scope="module")
def source(tiny_roberta_nodrop):
    return tiny_roberta_nodrop


def _run(run, source, corpus, nproc=2, grad_accum=2, keep_last=0, copy_from=None, cut=None):
    """Run the graph in ``run``; ``copy_from``: start from a copy of that run's checkpoint ``cut`` and its kept
    phase ends (what a job finds after a crash)."""
    if copy_from is not None:
        shutil.copytree(copy_from / "checkpoints" / tag_for(cut), run / "checkpoints" / tag_for(cut))
        shutil.copytree(copy_from / "checkpoints" / PHASE_ENDS, run / "checkpoints" / PHASE_ENDS)
    cfg = base_config(run, source, corpus, deepspeed=str(REPO / "ds_configs/zero2_fp32.json"),
                      checkpoint={"every_steps": 1, "keep_last": keep_last})
    cfg["phases"] = PHASES
    cfg["optim"] = {"micro_batch_size": 2, "grad_accum": grad_accum, "torch_adam": True}
    proc = launch(["--config", str(write_config(run.parent / f"{run.name}.yaml", cfg))], nproc=nproc)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def straight(tmp_path_factory, source, corpus):
    run = tmp_path_factory.mktemp("graph") / "straight"
    proc = _run(run, source, corpus)
    assert "phase 'x_to_en' starts at global step 4 from the end of 'common'" in proc.stderr
    assert "phase 'lang' starts at global step 6 from a merge of x_to_en, en_to_x" in proc.stderr
    return run


def _end(run, name):
    blob = read_phase_end(run / "checkpoints", name)
    return strip_prefix(blob["weights"]), blob["data"]


def _equal(a, b, names):
    return [n for n in names if not torch.equal(a[n], b[n])]


@pytest.mark.multiproc
def test_branches_freeze_their_half_and_start_from_the_same_place(straight):
    common, common_data = _end(straight, "common")
    en_to_x, _ = _end(straight, "en_to_x")
    x_to_en, x_data = _end(straight, "x_to_en")
    lower = [n for n in common if n.startswith(LOWER)]
    upper = [n for n in common if n.startswith(UPPER)]
    assert lower and upper
    assert _equal(en_to_x, common, lower) == [] and _equal(x_to_en, common, upper) == []
    assert _equal(en_to_x, common, upper) == upper and _equal(x_to_en, common, lower) == lower  # they trained
    # Both branches start from common's weights and data position: the same first batch, the same loss.
    losses = {s: r["train/loss"] for s, r in read_metrics(straight).items()}
    assert losses[3] == losses[5] and losses[4] != losses[6]
    assert x_data["sequences"] == common_data["sequences"] + 2 * 8  # 2 steps of 8 sequences after the rewind


@pytest.mark.multiproc
def test_merge_takes_each_half_from_its_branch_and_averages_the_rest(straight):
    en_to_x, _ = _end(straight, "en_to_x")
    x_to_en, _ = _end(straight, "x_to_en")
    final = load_checkpoint_fp32(straight / "checkpoints", tag_for(STEPS))
    assert final.keys() == en_to_x.keys()
    rest = [n for n in final if not n.startswith((LOWER, UPPER, *ITL))]
    assert _equal(final, x_to_en, [n for n in final if n.startswith(LOWER)]) == []
    assert _equal(final, en_to_x, [n for n in final if n.startswith(UPPER)]) == []
    mean = {n: (en_to_x[n] + x_to_en[n]) / 2 for n in rest}
    assert _equal(final, mean, rest) == []
    assert "roberta.embeddings.word_embeddings.weight" in rest and _equal(en_to_x, x_to_en, rest)  # not vacuous


def _assert_continues(straight, run, cut):
    want, got = read_metrics(straight), read_metrics(run)
    assert sorted(got) == list(range(cut + 1, STEPS + 1))
    assert [got[s]["train/loss"] for s in got] == [want[s]["train/loss"] for s in got]
    a = load_checkpoint_fp32(straight / "checkpoints", tag_for(STEPS))
    b = load_checkpoint_fp32(run / "checkpoints", tag_for(STEPS))
    assert _equal(a, b, a) == []


@pytest.mark.multiproc
@pytest.mark.parametrize("cut", [6], ids=["at-the-merge"])
def test_resume_bit_identical(straight, source, corpus, tmp_path, cut):
    """From the checkpoint of the merge's step. A 2-rank resume inside the second branch (step 5 of this graph's
    shape: 2 steps a phase) is tests/trelm/test_trelm_phases.py's, with TreLM's data streams as well; one where the
    second branch starts (step 4), on one rank, is test_resume_between_branches_on_one_rank_keeping_one_checkpoint
    below."""
    proc = _run(tmp_path / "run", source, corpus, copy_from=straight, cut=cut)
    assert f"resumed from {tag_for(cut)}" in proc.stderr
    _assert_continues(straight, tmp_path / "run", cut)


@pytest.mark.multiproc
def test_resume_between_branches_on_one_rank_keeping_one_checkpoint(straight, source, corpus, tmp_path):
    """The rescale path (universal checkpoint, 2 ranks -> 1, same global batch): equal up to summation order.
    keep_last=1 deletes the checkpoints at the ends of common (none here) and en_to_x (step 4) long before the
    merge needs their weights, which the kept phase ends still hold."""
    run = tmp_path / "run"
    proc = _run(run, source, corpus, nproc=1, grad_accum=4, keep_last=1, copy_from=straight, cut=4)
    assert "through a universal checkpoint" in proc.stderr and f"resumed from {tag_for(4)}" in proc.stderr
    assert "deleted checkpoint global_step000000004 (keep_last=1)" in proc.stderr
    assert complete_tags(run / "checkpoints") == [tag_for(STEPS)]
    assert sorted(p.name for p in (run / "checkpoints" / PHASE_ENDS).iterdir()) == [
        f"{name}.{ext}" for name in ("common", "en_to_x", "x_to_en") for ext in ("json", "safetensors")]
    want, got = read_metrics(straight), read_metrics(run)
    assert sorted(got) == list(range(5, STEPS + 1))
    for s in got:
        assert got[s]["train/loss"] == pytest.approx(want[s]["train/loss"], rel=1e-5), s
    a = load_checkpoint_fp32(straight / "checkpoints", tag_for(STEPS))
    b = load_checkpoint_fp32(run / "checkpoints", tag_for(STEPS))
    for n in a:
        torch.testing.assert_close(b[n], a[n], rtol=0, atol=1e-4, msg=n)


@pytest.mark.multiproc
def test_a_phase_end_from_another_branch_is_refused(straight, tmp_path):
    root = tmp_path / "checkpoints"
    shutil.copytree(straight / "checkpoints" / PHASE_ENDS, root / PHASE_ENDS)
    recorded = read_client_state(straight / "checkpoints", tag_for(6))["trainer"]["phase_ends"]
    assert sorted(recorded) == ["common", "en_to_x", "x_to_en"]
    values, data = load_phase_end(root, "x_to_en", recorded["x_to_en"])
    want = _end(straight, "x_to_en")[0]
    assert [n for n in want if not torch.equal(values(f"hf.{n}"), want[n])] == []
    for ext in ("json", "safetensors"):
        shutil.copyfile(root / PHASE_ENDS / f"common.{ext}", root / PHASE_ENDS / f"x_to_en.{ext}")
    with pytest.raises(CheckpointError, match="x_to_en.safetensors is not what phase 'x_to_en' ended with in this "
                                              "run"):
        load_phase_end(root, "x_to_en", recorded["x_to_en"])
    (root / PHASE_ENDS / "x_to_en.safetensors").unlink()
    with pytest.raises(CheckpointError, match="x_to_en.safetensors is missing"):
        load_phase_end(root, "x_to_en", recorded["x_to_en"])


def _keep(root, name, weights):
    """Phase ``name``'s end as ``save_phase_end`` keeps it (its writer, ``write_values``, with the digest, and the
    JSON beside it), without a process group; returns the digest a checkpoint records."""
    import json

    from xpt_ds.checkpoint.values import write_values
    path = root / PHASE_ENDS / f"{name}.safetensors"
    path.parent.mkdir(parents=True, exist_ok=True)
    digest = write_values(path, sorted((n, tuple(t.shape)) for n, t in weights.items()), weights.__getitem__, 0,
                          digest=True)
    path.with_suffix(".json").write_text(json.dumps({"digest": digest, "data": {"sequences": 8}}))
    return digest


def test_a_phase_end_whose_weights_are_not_what_the_run_recorded_is_refused(tmp_path):
    """Another run's NAME.safetensors (same names and shapes) copied in beside this run's NAME.json: its bytes do
    not match the digest the checkpoint recorded, and it is refused by name; a file cut short is one line naming
    it. Unit-level, on phase ends written by the real writer."""
    root, other = tmp_path / "run" / "checkpoints", tmp_path / "other" / "checkpoints"
    weights = {"hf.w": torch.ones(4, 4), "hf.b": torch.arange(3.0)}
    digest = _keep(root, "common", weights)
    values, data = load_phase_end(root, "common", digest)
    assert all(torch.equal(values(n), w) for n, w in weights.items()) and data == {"sequences": 8}
    _keep(other, "common", {"hf.w": torch.full((4, 4), 7.0), "hf.b": torch.arange(3.0)})
    path = root / PHASE_ENDS / "common.safetensors"
    shutil.copyfile(other / PHASE_ENDS / "common.safetensors", path)
    with pytest.raises(CheckpointError) as info:
        load_phase_end(root, "common", digest)
    assert str(info.value).startswith(f"{path} is not what phase 'common' ended with in this run (blake2b differs "
                                      f"from the checkpoint's record {digest})")
    _keep(root, "common", weights)
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(CheckpointError) as info:
        load_phase_end(root, "common", digest)
    assert str(info.value).startswith(f"cannot read {path}: ") and "\n" not in str(info.value)


def _one_rank_config(run, source, corpus) -> dict:
    """One rank: common (steps 1-2), other (3-4), branch (5-6) starting from common's end; a checkpoint and a
    validation pass a step."""
    cfg = base_config(run, source, corpus, checkpoint={"every_steps": 1})
    cfg["logging"]["eval_every"] = 1
    cfg["phases"] = [{"name": "common", "steps": 2, "lr": 1e-3, "warmup_steps": 1, "trainable": ["@new"]},
                     {"name": "other", "steps": 2, "lr": 1e-3, "warmup_steps": 1, "trainable": ["@all"]},
                     {"name": "branch", "steps": 2, "lr": 1e-3, "warmup_steps": 1, "start_from": "common",
                      "trainable": ["@all"]}]
    return cfg


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory, source, corpus):
    """``_one_rank_config``'s run, made once for the tests below; they work on copies of it."""
    run = tmp_path_factory.mktemp("one_rank") / "run"
    proc = launch(["--config", str(write_config(run.parent / "c.yaml", _one_rank_config(run, source, corpus)))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run


def test_a_resume_before_a_kept_phase_end_moves_it_aside_and_follows_the_new_branch(one_rank, source, corpus,
                                                                                      tmp_path):
    """One rank: common (steps 1-2), other (3-4), branch (5-6) starting from common's end. Resuming from step 1
    with another rate for common starts a new branch: the old end of common moves, not deleted, next to the
    abandoned checkpoints, the new branch keeps its own, and 'branch' starts from it."""
    from xpt_ds.checkpoint.branches import ABANDONED
    from xpt_ds.checkpoint.values import state_digest
    run = tmp_path / "run"
    shutil.copytree(one_rank, run)
    path = str(write_config(tmp_path / "c.yaml", _one_rank_config(run, source, corpus)))
    old = read_phase_end(run / "checkpoints", "common")
    old_loss = read_metrics(run)[5]["train/loss"]
    proc = launch(["--config", path, "--phases.0.lr=3e-3", "--resume", tag_for(1)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    moved = run / "checkpoints" / ABANDONED / "branch-001"
    assert f"moved the end of phase(s) common, which the branch it leaves kept after {tag_for(1)}, to" in proc.stderr
    assert state_digest(read_phase_end(moved, "common")["weights"]) == old["digest"]  # moved, not deleted
    new = read_phase_end(run / "checkpoints", "common")
    assert new["digest"] != old["digest"]
    assert read_client_state(run / "checkpoints", tag_for(6))["trainer"]["phase_ends"] == {"common": new["digest"]}
    assert "phase 'branch' starts at global step 4 from the end of 'common'" in proc.stderr
    assert read_metrics(run)[5]["train/loss"] != old_loss


def test_a_resume_that_shortens_a_phase_to_the_steps_it_took_keeps_its_end_for_a_later_phase(one_rank, source,
                                                                                              corpus, tmp_path):
    """A requeue from common's step 1 with common shortened to 1 step: the checkpoint is at common's new end but
    records no end of it (the loop keeps it only at a phase's last step, which the run never reaches). The phase
    ends there as at its last step (validation pass, kept end; the checkpoint it resumed from is kept as it is),
    'other' trains, and 'branch' starts from common's end: step 1's weights and data position (dropout off: its
    first loss is other's first). Before, 'branch' could never start: every resume failed with 'records no end
    of phase'."""
    run = tmp_path / "run"
    shutil.copytree(one_rank / "checkpoints" / tag_for(1), run / "checkpoints" / tag_for(1))
    shutil.copyfile(one_rank / "metrics.jsonl", run / "metrics.jsonl")
    cfg = _one_rank_config(run, source, corpus)
    cfg["phases"][0]["steps"] = 1
    proc = launch(["--config", str(write_config(tmp_path / "c.yaml", cfg))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"phase 'common' ends at its step 1 (phases[0].steps=1), where checkpoint {tag_for(1)} is" in proc.stderr
    assert "phase 'branch' starts at global step 3 from the end of 'common'" in proc.stderr
    end, data = _end(run, "common")
    step1 = load_checkpoint_fp32(one_rank / "checkpoints", tag_for(1))
    assert end.keys() == step1.keys() and _equal(end, step1, step1) == []
    assert data == read_client_state(one_rank / "checkpoints", tag_for(1))["data"]
    digest = read_phase_end(run / "checkpoints", "common")["digest"]
    for step in (3, 5):  # every later checkpoint records its end
        assert read_client_state(run / "checkpoints", tag_for(step))["trainer"]["phase_ends"] == {"common": digest}
    kept = sorted(p.relative_to(run) for p in (run / "checkpoints" / tag_for(1)).rglob("*") if p.is_file())
    assert kept and all((run / p).read_bytes() == (one_rank / p).read_bytes() for p in kept)  # not written again
    metrics = read_metrics(run)
    assert "valid/loss" in metrics[1] and sorted(s for s in metrics if "train/loss" in metrics[s]) == [1, 2, 3, 4, 5]
    # step 1's pass ran before its checkpoint: the phase's end does not run it again (it logged step 1 twice)
    validated = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()
                 if "valid/loss" in line]
    assert validated == [1, 2, 3, 4, 5]
    assert metrics[2]["train/loss"] == metrics[4]["train/loss"]  # not where 'other' ended
