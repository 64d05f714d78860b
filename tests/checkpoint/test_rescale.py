"""Resume at another scale through the real launchers: save at 2 ranks and resume at 1, and the reverse, also
across a ZeRO stage change, via DeepSpeed universal checkpoints made on demand.

The global batch is kept (micro-batch x accumulation x ranks), so a rescaled run consumes exactly the same
sequences with the same (per-sequence seeded) masks; with dropout off, it must then follow the uninterrupted
run up to floating-point summation order. The cut is in a third phase that trains only the ITLs, after a
phase that trained everything: the frozen encoder weights are then not the source's, and a universal load,
which skips the module state dict, must get them from frozen_fp32.pt. Different data, lost Adam moments or
step counts, or frozen weights not restored would all show up far above the tolerance."""
import contextlib
import os
import shutil
import signal
import time

import psutil
import pytest
import torch

from conftest import REPO, base_config, launch, read_marker, read_metrics, start_main, write_config
from xpt_ds.export.hf import load_checkpoint_fp32
from xpt_ds.checkpoint.store import read_client_state
from xpt_ds.checkpoint.tags import complete_tags, tag_for

pytestmark = pytest.mark.multiproc

CUT, STEPS = 5, 8
# Large enough that the weights' decay shows far above the tolerances (lr 1e-3: 0.5% of a weight a step), so a stage
# that decayed otherwise than another (ZeRO-3 once decayed nothing: xpt_ds.model.weight_decay) fails the comparison.
WEIGHT_DECAY = 5.0


@pytest.fixture(scope="module")
def source(tiny_roberta_nodrop):
    return tiny_roberta_nodrop


def _run(tmp_path, name, source, corpus, nproc, ds, precision="fp32", resume_from=None, flags=(), env=None,
         ok=True):
    """Train with global batch 8 (2 x accumulation x ranks); optionally start from a copy of another run's
    checkpoint at step CUT (unless the run directory is there: the same command again). ``ok``: assert it
    exits 0."""
    run, cfg = _prepare(tmp_path, name, source, corpus, nproc, ds, precision, resume_from)
    proc = launch(["--config", str(cfg), *flags], nproc=nproc, env=env)
    assert proc.returncode == 0 or not ok, proc.stderr[-3000:]
    return run, proc


def _prepare(tmp_path, name, source, corpus, nproc, ds, precision="fp32", resume_from=None):
    """``_run``'s run directory and config, without running it."""
    run = tmp_path / name
    if resume_from is not None and not run.exists():
        tag = tag_for(CUT)
        shutil.copytree(resume_from / "checkpoints" / tag, run / "checkpoints" / tag)
        # What a save killed at the other scale leaves behind: the final tag, without its marker, with
        # that scale's files. The re-save must not keep any of them.
        stale = run / "checkpoints" / tag_for(STEPS)
        shutil.copytree(resume_from / "checkpoints" / tag_for(STEPS), stale)
        (stale / "COMPLETE").unlink()
        (stale / "universal").mkdir()
    cfg = base_config(run, source, corpus, deepspeed=str(REPO / f"ds_configs/{ds}_{precision}.json"),
                      checkpoint={"every_steps": CUT})
    cfg["phases"] = [{"name": "phase1", "steps": 2, "lr": 1e-3, "warmup_steps": 1},
                     {"name": "phase2", "steps": 2, "lr": 1e-3, "warmup_steps": 1},
                     {"name": "itl_only", "steps": STEPS - 4, "lr": 1e-3, "warmup_steps": 1, "trainable": ["@itl"]}]
    cfg["optim"] = {"micro_batch_size": 2, "grad_accum": 4 // nproc, "torch_adam": precision == "fp32",
                    "weight_decay": WEIGHT_DECAY}
    return run, write_config(tmp_path / f"{name}.yaml", cfg)


def _losses(run):
    return {step: row["train/loss"] for step, row in read_metrics(run).items() if "train/loss" in row}


def _assert_continues(straight, rescaled, proc, saved_by, tol):
    saved = f"saved by {saved_by} rank{'s' if saved_by > 1 else ''} at ZeRO"
    assert saved in proc.stderr and "through a universal checkpoint" in proc.stderr
    assert f"resumed from {tag_for(CUT)}" in proc.stderr
    assert f"engine state of {tag_for(CUT)} loaded from its universal copy in " in proc.stderr  # and its seconds
    assert "global batch" not in proc.stderr  # grad_accum kept it: no warning
    assert "dropout masks" not in proc.stderr  # the source draws no dropout
    ref, got = _losses(straight), _losses(rescaled)
    assert sorted(got) == list(range(CUT + 1, STEPS + 1))  # continues after the cut, nothing repeated
    for step in got:
        assert got[step] == pytest.approx(ref[step], rel=tol), (step, got, ref)
    a = load_checkpoint_fp32(straight / "checkpoints", tag_for(STEPS))
    b = load_checkpoint_fp32(rescaled / "checkpoints", tag_for(STEPS))
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=0, atol=10 * tol, msg=name)


def test_two_ranks_to_one_and_zero2_to_zero1(tmp_path, source, corpus):
    """First killed (``kill -9``) while it converts the 2-rank checkpoint, then the same command to the end."""
    straight, _ = _run(tmp_path, "straight2", source, corpus, nproc=2, ds="zero2")
    _killed_while_converting(tmp_path, *_prepare(tmp_path, "at1", source, corpus, nproc=1, ds="zero1",
                                                 resume_from=straight))
    rescaled, proc = _run(tmp_path, "at1", source, corpus, nproc=1, ds="zero1", resume_from=straight)
    _assert_continues(straight, rescaled, proc, saved_by=2, tol=1e-5)
    assert read_marker(rescaled / "checkpoints", tag_for(STEPS)) == {"global_step": STEPS, "world_size": 1, "zero_stage": 1}
    assert complete_tags(rescaled / "checkpoints") == [tag_for(CUT), tag_for(STEPS)]
    final = {f.name for f in (rescaled / "checkpoints" / tag_for(STEPS)).iterdir()}
    assert "zero_pp_rank_1_mp_rank_00_optim_states.pt" not in final and "universal" not in final
    # ZeRO-2 -> 3: the universal copy (another one: the run directory is new) gets what ZeRO-3's loader reads
    at3, proc = _run(tmp_path, "at1_zero3", source, corpus, nproc=1, ds="zero3", resume_from=straight)
    _assert_continues(straight, at3, proc, saved_by=2, tol=1e-5)
    assert read_marker(at3 / "checkpoints", tag_for(STEPS))["zero_stage"] == 3


# Loaded by every interpreter of the job (PYTHONPATH): DeepSpeed's ds_to_universal, which rank 0 starts, sleeps first,
# as a conversion of a large model's optimizer state takes minutes.
SLOW_CONVERSION = """import os, sys, time
if sys.orig_argv[1:3] == ["-m", "deepspeed.checkpoint.ds_to_universal"]:
    time.sleep(float(os.environ["SLOW_CONVERSION_S"]))
"""


def test_one_rank_to_two_at_zero3(tmp_path, source, corpus):
    """Rank 1 waits while rank 0 converts the checkpoint. A conversion stopped at
    checkpoint.rescale_timeout_minutes ends both ranks with the same line and leaves nothing of itself; the same
    command then converts for longer than guard.collective_timeout_s, which bounds the job's collectives, and
    rank 1 waits it out (in a group of its own for the wait, xpt_ds.runtime.distributed.rank0_alone)."""
    straight, _ = _run(tmp_path, "straight1", source, corpus, nproc=1, ds="zero3")
    # with dropout, said before the conversion: on 2 ranks the resumed steps would draw other masks
    stopped, proc = _run(tmp_path, "at2", source, corpus, nproc=2, ds="zero3", resume_from=straight, ok=False,
                         flags=["--checkpoint.rescale_timeout_minutes=0.002", "--model.dropout=0.1"])  # 0.12 s
    assert f"resuming {tag_for(CUT)} on 2 rank(s), where it trained on 1: each rank draws dropout" in proc.stderr
    line = (f"error: converting checkpoint {stopped / 'checkpoints' / tag_for(CUT)} to a universal checkpoint did "
            "not finish within 0.002 minutes (checkpoint.rescale_timeout_minutes), and was stopped; raise it, or "
            "resume at the world size and ZeRO stage the checkpoint was saved at")
    said = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert proc.returncode != 0 and said and set(said) == {line}, proc.stderr[-3000:]
    assert "lost another rank" not in proc.stderr and "timed out" not in proc.stderr
    assert not any((stopped / "checkpoints" / tag_for(CUT)).glob("*universal*"))
    rescaled, proc = _run(tmp_path, "at2", source, corpus, nproc=2, ds="zero3", resume_from=straight,
                          flags=["--guard.collective_timeout_s=8"], env={**_slow(tmp_path), "SLOW_CONVERSION_S": "12"})
    _assert_continues(straight, rescaled, proc, saved_by=1, tol=1e-5)
    assert "converted checkpoint" in proc.stderr
    # once a newer checkpoint is complete, the universal copy goes (a resume at another scale makes it again)
    assert f"deleted the universal copy of checkpoint {tag_for(CUT)} (" in proc.stderr
    assert not any((rescaled / "checkpoints" / tag_for(CUT)).glob("*universal*"))
    assert read_marker(rescaled / "checkpoints", tag_for(STEPS)) == {"global_step": STEPS, "world_size": 2, "zero_stage": 3}

    assert _groups(straight / "checkpoints" / tag_for(CUT)) == _decay_groups()

    # ZeRO-3 -> 2, on 2 ranks: the universal copy gets what ZeRO-1/2's loader reads
    at2_zero2, proc = _run(tmp_path, "at2_zero2", source, corpus, nproc=2, ds="zero2", resume_from=straight)
    _assert_continues(straight, at2_zero2, proc, saved_by=1, tol=1e-5)
    assert read_marker(at2_zero2 / "checkpoints", tag_for(STEPS))["zero_stage"] == 2

    cfg = tmp_path / "at2.yaml"  # stage 0 keeps the whole optimizer state in its own files: no universal copy
    proc = launch(["--config", str(cfg), f"--deepspeed={REPO}/ds_configs/zero0_fp32.json"], nproc=1)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: checkpoint {tag_for(STEPS)} was saved at ZeRO stage 3 and this run uses stage 0 (config key "
        "'deepspeed'); a resume can change the stage only among 1, 2 and 3, and the precision only at those stages")


def _groups(tag_dir) -> list[tuple[float, set[bool]]]:
    """A ZeRO-3 checkpoint's optimizer groups: (weight decay, {whether a parameter is a matrix, for each}) each."""
    optim = torch.load(tag_dir / "zero_pp_rank_0_mp_rank_00_optim_states.pt", weights_only=False)
    groups = optim["optimizer_state_dict"]["optimizer_state_dict"]["param_groups"]
    shapes = read_client_state(tag_dir.parent, tag_dir.name)["param_shapes"]  # one sub-group per group here
    assert len(shapes) == len(groups)
    return [(g["weight_decay"], {len(s) >= 2 for s in sub.values()}) for g, sub in zip(groups, shapes)]


def _decay_groups():
    """The weights (no LayerNorm of the tiny RoBERTa's is a matrix) decay, the vectors do not."""
    return [(WEIGHT_DECAY, {True}), (0.0, {False})]


def test_a_zero3_checkpoint_of_one_optimizer_group_resumes_with_weight_decay(tmp_path, source, corpus, monkeypatch):
    """xpt-ds before 2026-12-02 judged a ZeRO-3 parameter by its partition's shape (a vector), so every one went
    into the no-decay group and a ZeRO-3 run decayed nothing. Such a checkpoint (made here by the same grouping, in
    the forked one-rank run) resumes through a universal copy into this run's two groups, with a warning; at ZeRO-1
    too, whose loader pairs the engine's groups with the saved ones by position (until 2026-12-04 the no-decay
    group's states were never loaded: every step after the resume was skipped as non-finite, and the run finished
    with exit 0, saving vectors of up to 1.7e38)."""
    import xpt_ds.training.engine as engine
    monkeypatch.setattr(engine, "decays", lambda name, shape: False)  # the old grouping of every ZeRO-3 weight
    old, _ = _run(tmp_path, "old", source, corpus, nproc=1, ds="zero3")
    assert _groups(old / "checkpoints" / tag_for(CUT)) == [(0.0, {True, False})]
    monkeypatch.undo()
    shutil.rmtree(old / "checkpoints" / tag_for(STEPS))
    proc = launch(["--config", str(tmp_path / "old.yaml")], nproc=1)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resumed from {tag_for(CUT)}" in proc.stderr and "through a universal checkpoint" in proc.stderr
    assert (f"checkpoint {tag_for(CUT)} holds the weights that decay and those that do not in one optimizer group"
            in proc.stderr)
    assert _groups(old / "checkpoints" / tag_for(STEPS)) == _decay_groups()
    at_zero1, proc = _run(tmp_path, "at_zero1", source, corpus, nproc=1, ds="zero1", resume_from=old)
    assert "holds the weights that decay and those that do not in one optimizer group" in proc.stderr
    assert "not finite" not in proc.stderr, proc.stderr[-3000:]
    want, got = _losses(old), _losses(at_zero1)
    assert sorted(got) == list(range(CUT + 1, STEPS + 1))
    assert all(got[step] == pytest.approx(want[step], rel=1e-5) for step in got), (got, want)
    a = load_checkpoint_fp32(old / "checkpoints", tag_for(STEPS))
    b = load_checkpoint_fp32(at_zero1 / "checkpoints", tag_for(STEPS))
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=0, atol=1e-4, msg=name)


def _slow(tmp_path) -> dict:
    """The environment that makes a job's ds_to_universal sleep SLOW_CONVERSION_S seconds first."""
    (tmp_path / "slow").mkdir(exist_ok=True)
    (tmp_path / "slow/sitecustomize.py").write_text(SLOW_CONVERSION)
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path / "slow"), os.environ.get("PYTHONPATH")]))}


def _killed_while_converting(tmp_path, run, cfg):
    """``kill -9`` of the rank that converts (rank 0; an out-of-memory kill, a node's cleanup) while the conversion
    runs: the conversion, in a session of its own so that its timeout can stop all of it, does not outlive the rank,
    or a requeued job's conversion would write into the same folder beside it."""
    job = start_main("xpt_ds.cli.train", ["--config", str(cfg)], tmp_path / "killed.log",
                     env={**_slow(tmp_path), "SLOW_CONVERSION_S": "600"})
    try:
        conversion = _conversion_of(run, deadline=time.time() + 120)
        assert conversion, (tmp_path / "killed.log").read_text()[-3000:]  # ds_to_universal was running
        os.kill(job.pid, signal.SIGKILL)
        assert job.wait(timeout=60) == -signal.SIGKILL
        _, alive = psutil.wait_procs(conversion, timeout=15)
        assert not alive, [" ".join(p.cmdline()) for p in alive]
        # what a kill while ds_to_universal writes leaves in its folder (the stand-in was still asleep): a file cut
        # short, which the next resume neither refuses the checkpoint for nor reads (before 2026-12-02 it did both)
        half = run / "checkpoints" / tag_for(CUT) / "universal.tmp/zero/hf.roberta.pooler.dense.weight/fp32.pt"
        half.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"param": torch.zeros(1000)}, half)
        half.write_bytes(half.read_bytes()[:500])
    finally:
        for p in _converting(run):
            with contextlib.suppress(psutil.Error):
                p.kill()
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(timeout=60)


def _conversion_of(run, deadline: float) -> list:
    """The processes converting a checkpoint of ``run`` (``_converting``) once ds_to_universal itself runs; none
    once ``deadline`` has passed."""
    while not any((found := _converting(run)).values()):
        if time.time() > deadline:
            return []  # not converting (yet): a tether alone is not counted
        time.sleep(0.1)
    return list(found)


def _converting(run) -> dict:
    """Every process whose command line names ds_to_universal and ``run`` (ds_to_universal and whatever started
    it) -> whether it is ds_to_universal itself."""
    found = {}
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            cmd = p.cmdline()
            if "deepspeed.checkpoint.ds_to_universal" in cmd and any(str(run) in a for a in cmd):
                found[p] = cmd[1:3] == ["-m", "deepspeed.checkpoint.ds_to_universal"]
    return found


@pytest.mark.parametrize("saved,resumed", [(("zero3", 1, "bf16"), ("zero1", 2, "bf16")),
                                           (("zero2", 2, "bf16"), ("zero2", 2, "fp32"))],
                         ids=["zero3-1-to-zero1-2", "zero2-bf16-to-fp32"])
def test_bf16(tmp_path, source, corpus, saved, resumed):
    """The production path: bf16 with DeepSpeed FusedAdam (whose Adam step is an int in each state), at another
    world size and stage; and a bf16 checkpoint resumed in fp32 (torch's AdamW) on as many ranks at the same stage,
    which the rigid load cannot read (bf16 runs name their optimizer files bf16_zero_pp_rank_*). The world change
    at ZeRO-1/2 alone is test_two_ranks_to_one_and_zero2_to_zero1's (fp32)."""
    straight, _ = _run(tmp_path, "bf16_straight", source, corpus, nproc=saved[1], ds=saved[0], precision=saved[2])
    rescaled, proc = _run(tmp_path, "bf16_rescaled", source, corpus, nproc=resumed[1], ds=resumed[0],
                          precision=resumed[2], resume_from=straight)
    _assert_continues(straight, rescaled, proc, saved_by=saved[1], tol=1e-2)
    assert f"at ZeRO stage {saved[0][-1]} in {saved[2]}; resuming on " in proc.stderr


def test_a_checkpoint_whose_optimizer_never_stepped_resumes_at_another_scale(tmp_path, source, corpus):
    """The ITL-only phase's steps 5 and 6 are non-finite (guard.inject_nan_steps) and the run halts with checkpoint 6,
    whose optimizer took no step: it holds no Adam state, which ds_to_universal cannot convert (ZeRO-3: KeyError 0;
    ZeRO-1/2 wrote no parameter). On 1 rank at ZeRO-1 the run starts from the checkpoint's fp32 values, its frozen
    encoder from frozen_fp32, with a new optimizer (the state the checkpoint holds), and goes on as the resume at the
    saving scale does (DeepSpeed's own load)."""
    halted, cfg = _prepare(tmp_path, "halted", source, corpus, nproc=2, ds="zero3")
    proc = launch(["--config", str(cfg), "--guard.inject_nan_steps=[5,6]", "--guard.max_bad_steps=1"], nproc=2)
    assert proc.returncode != 0 and f"stopped at step 6 with checkpoint {tag_for(6)}" in proc.stderr, proc.stderr
    runs = {}
    for name, nproc, ds in (("same", 2, "zero3"), ("at1_zero1", 1, "zero1")):
        shutil.copytree(halted, tmp_path / name)
        runs[name], proc = _run(tmp_path, name, source, corpus, nproc=nproc, ds=ds,
                                flags=["--guard.inject_nan_steps=[]"])
        assert f"resumed from {tag_for(6)}" in proc.stderr
    assert "set from its fp32 values" in proc.stderr and "so it holds no Adam state" in proc.stderr
    assert not (runs["at1_zero1"] / "checkpoints" / tag_for(6) / "universal").exists()
    ref, got = _losses(runs["same"]), _losses(runs["at1_zero1"])
    assert [s for s in got if s > 6] == [7, 8]
    for step in (7, 8):
        assert got[step] == pytest.approx(ref[step], rel=1e-5), (step, got, ref)
    a = load_checkpoint_fp32(runs["same"] / "checkpoints", tag_for(STEPS))
    b = load_checkpoint_fp32(runs["at1_zero1"] / "checkpoints", tag_for(STEPS))
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=0, atol=1e-4, msg=name)


def test_the_conversion_gets_half_the_cpus_at_most_8_and_what_memory_allows():
    from xpt_ds.checkpoint.universal import conversion_workers
    gb = 10**9
    assert conversion_workers([gb], cpus=2, available=100 * gb) == 1
    assert conversion_workers([gb], cpus=12, available=100 * gb) == 6
    assert conversion_workers([gb] * 8, cpus=96, available=1000 * gb) == 8
    assert conversion_workers([12 * gb] * 8, cpus=96, available=50 * gb) == 2  # 2 x 12 GB fits twice
    assert conversion_workers([12 * gb] * 8, cpus=96, available=10 * gb) == 1
    assert conversion_workers([], cpus=4, available=None) == 2


def test_a_resume_at_another_global_batch_says_so_and_how_to_keep_it(tmp_path):
    """2 ranks x micro 2 x accum 2 = 8 sequences per step; resumed on 1 rank with the same flags it is 4."""
    import json
    from xpt_ds.config import OptimConfig
    from xpt_ds.checkpoint.tag_checks import batch_change
    tag = tmp_path / "global_step000000006"
    tag.mkdir()
    (tag / "COMPLETE").write_text(json.dumps({"global_step": 6, "world_size": 2, "zero_stage": 2}))
    client = {"config": {"optim": {"micro_batch_size": 2, "grad_accum": 2}}}
    line = batch_change(tag, client, OptimConfig(micro_batch_size=2, grad_accum=2), world=1)
    assert line == ("resuming global_step000000006 at a global batch of 4 sequences per step (optim.micro_batch_size 2 "
                    "x optim.grad_accum 2 x 1 rank(s)), where it trained with 8 (2 rank(s)): the learning rate schedule "
                    "is not rescaled for it; optim.grad_accum=4 keeps 8")
    assert batch_change(tag, client, OptimConfig(micro_batch_size=2, grad_accum=4), world=1) is None
    assert batch_change(tag, client, OptimConfig(micro_batch_size=3, grad_accum=1), world=1).endswith("rescaled for it")
    (tag / "COMPLETE").write_text(json.dumps({"global_step": 6}))  # a marker from before world_size was recorded
    assert batch_change(tag, client, OptimConfig(micro_batch_size=2, grad_accum=2), world=2) is None
    assert "(2 rank(s))" in batch_change(tag, {**client, "dp_world_size": 2}, OptimConfig(micro_batch_size=2,
                                                                                          grad_accum=2), world=1)


def test_a_resume_at_another_world_size_says_when_the_dropout_masks_change(tmp_path):
    """Each rank draws dropout from its own stream (seed + rank): on another number of ranks the resumed steps
    draw other masks than the uninterrupted run (a GPT-2 run resumed from 2 ranks on 1: 5.8808 against 5.8765 at
    the next step, docs/cluster.md). Said when the model draws any dropout, the LoRA branch's included."""
    import json
    from transformers import GPT2Config, LlamaConfig, RobertaConfig
    from xpt_ds.checkpoint.tag_checks import dropout_change
    tag = tmp_path / "global_step000000006"
    tag.mkdir()
    (tag / "COMPLETE").write_text(json.dumps({"global_step": 6, "world_size": 2, "zero_stage": 2}))
    line = dropout_change(tag, {}, RobertaConfig(), world=1)
    assert line == ("resuming global_step000000006 on 1 rank(s), where it trained on 2: each rank draws dropout from "
                    "a stream of its own, so from this step on the dropout masks differ from those the run would have "
                    "drawn uninterrupted, and its losses follow the uninterrupted run's only closely (model.dropout: 0 "
                    "draws none)")
    assert dropout_change(tag, {}, RobertaConfig(), world=2) is None
    assert dropout_change(tag, {}, RobertaConfig(hidden_dropout_prob=0, attention_probs_dropout_prob=0), 4) is None
    assert dropout_change(tag, {}, GPT2Config(resid_pdrop=0, embd_pdrop=0, attn_pdrop=0.1), world=4) is not None
    llama = LlamaConfig()  # attention_dropout 0.0
    assert dropout_change(tag, {}, llama, world=1) is None
    llama.xpt_lora = {"rank": 8, "dropout": 0.05}
    assert dropout_change(tag, {}, llama, world=1).endswith("only closely (model.lora.dropout: 0 draws none)")
    llama.attention_dropout = 0.1
    assert dropout_change(tag, {}, llama, world=1).endswith("(model.dropout: 0 and model.lora.dropout: 0 draw none)")


def test_deepspeeds_universal_loaders_read_memory_mapped_plain_data(tmp_path):
    """``universal.mapped_universal_loads``, around a universal load: each of DeepSpeed's loaders of a universal
    checkpoint reads a file memory-mapped (so a rank reads the pages of its slice of a parameter, not the whole
    file, as it did on every rank: at the 1B shape's phase 1 resumed on 2 ZeRO-3 ranks, 2.41 GB through read() a
    rank before, 0.17 GB after; BENCHMARKS.md) and as plain data, a file the conversion wrote after the tag's
    check too; after it, each reads as before."""
    import importlib
    import inspect
    from pathlib import PurePosixPath

    from xpt_ds.checkpoint.universal import LOADERS, mapped_universal_loads
    from xpt_ds.io.trust import UntrustedError

    values = torch.arange(1 << 16, dtype=torch.float32)
    plain, pickled = tmp_path / "fp32.pt", tmp_path / "exp_avg.pt"
    torch.save({"param": values}, plain)
    torch.save({"param": values, "path": PurePosixPath("x")}, pickled)  # a pickle that names a global to call
    modules = [importlib.import_module(name) for name in LOADERS]
    assert all("torch.load(" in inspect.getsource(m) for m in modules)  # DeepSpeed still reads through these
    with mapped_universal_loads():
        for module in modules:
            loaded = module.torch.load(str(plain), weights_only=False)["param"]
            assert str(plain) in open("/proc/self/maps").read()  # mapped, not read
            assert torch.equal(loaded, values)
            del loaded
            with pytest.raises(UntrustedError, match=f"{pickled} is not plain data"):
                module.torch.load(str(pickled), weights_only=False)
            assert module.torch.float32 is torch.float32 and module.torch.zeros(2).sum() == 0
    assert all(m.torch is torch for m in modules)
    with mapped_universal_loads(allow_pickle=True):  # checkpoint.allow_pickle: the user's word
        assert modules[0].torch.load(str(pickled), weights_only=False)["path"] == PurePosixPath("x")
    assert all(m.torch is torch for m in modules)
