"""Resume is exact: straight through vs. stopped and resumed, 2 ranks through torchrun (``processes.launch``)."""
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from conftest import REPO, base_config, config_only, launch, one_error_line_of, read_metrics, write_config
from xpt_ds.export.hf import load_checkpoint_fp32
from xpt_ds.checkpoint.tags import complete_tags, tag_for

pytestmark = pytest.mark.multiproc


CUTS = {2: "mid-phase1", 4: "boundary", 6: "mid-phase2"}
# ZeRO-3 mid-phase 1 and mid-phase 2; ZeRO-3 at the boundary is tests/training/test_decoder_train.py's (Llama, 2 ranks,
# resumed from the phase-1 checkpoint: the same phase switch on the same trainer, bit for bit). ZeRO 1
# and 2 run the same DeepSpeed optimizer (stage 1 and 2); between them every cut is covered elsewhere, so only
# ZeRO-1 at the boundary runs here: ZeRO-1 mid-phase-2 is test_checkpoint_from_an_older_version_resumes, ZeRO-2
# mid-phase-1 is test_crash_save's (its rounds resume from phase-1 checkpoints and must end on the uninterrupted
# run's losses and weights), ZeRO-2 at the boundary is tests/training/test_decoder_train.py's (GPT-2, bf16, 2 ranks).
# ZeRO-2's other paths are test_frozen's, test_rescale's and test_checkpoint_errors'.
CASES = [(3, 2), (1, 4), (3, 6)]


@pytest.mark.parametrize("stage,cut", CASES, ids=[f"{CUTS[c]}-{s}" for s, c in CASES])
def test_resume_bit_identical(stage, cut, straight_runs, tmp_path):
    """The resumed run's source is a copy of the source without its weights: the checkpoint holds every weight and
    which of them came from the source (its tags), so a resume reads only the source's config.json."""
    straight = straight_runs(stage)
    cfg = yaml.safe_load((straight / "cfg.yaml").read_text())
    cfg["run_dir"] = str(tmp_path / "run")
    cfg["model"]["source"] = str(config_only(Path(cfg["model"]["source"]), tmp_path / "source"))
    shutil.copytree(straight / "run/checkpoints" / tag_for(cut), tmp_path / "run/checkpoints" / tag_for(cut))
    shutil.copytree(straight / "run/scans", tmp_path / "run/scans")  # the shards' records (data.reuse_scans)
    records = sorted(p.name for p in (tmp_path / "run/scans").iterdir())
    (tmp_path / "run/scans" / f"{'0' * 32}.npz").write_bytes(b"a record of a file that changed since")
    proc = launch(["--config", str(write_config(tmp_path / "cfg.yaml", cfg))], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resumed from {tag_for(cut)}" in proc.stderr
    assert f"shard scans: 2 read from {tmp_path / 'run/scans'}, 0 scanned" in proc.stderr  # train and valid
    assert "shard scans: 1 records that no rank used at this start removed" in proc.stderr
    assert sorted(p.name for p in (tmp_path / "run/scans").iterdir()) == records
    assert f"engine state of {tag_for(cut)} loaded in " in proc.stderr  # with its seconds

    want, got = read_metrics(straight / "run"), read_metrics(tmp_path / "run")
    assert sorted(got) == list(range(cut + 1, 9))
    for step in got:
        assert got[step]["train/loss"] == want[step]["train/loss"], step
        assert got[step]["train/phase"] == want[step]["train/phase"]

    final = tag_for(8)
    assert complete_tags(tmp_path / "run/checkpoints")[-1] == final
    a = load_checkpoint_fp32(straight / "run/checkpoints", final)
    b = load_checkpoint_fp32(tmp_path / "run/checkpoints", final)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])][:5]
    config = "hf_config/config.json"  # the model the resumed run rebuilt is the one an export writes
    assert (tmp_path / "run/checkpoints" / final / config).read_bytes() == (straight / "run/checkpoints" / final /
                                                                            config).read_bytes()


def test_checkpoint_from_an_older_version_resumes(straight_runs, tmp_path):
    """Written before the marker recorded world size and stage, before the guards' state existed and before the
    trainer state counted the LR schedule's updates apart from its steps; mid-phase 2 at ZeRO-1, so this is that
    cut's exact-resume case too."""
    straight = straight_runs(1)
    cfg = yaml.safe_load((straight / "cfg.yaml").read_text())
    cfg["run_dir"] = str(tmp_path / "run")
    tag_dir = tmp_path / "run/checkpoints" / tag_for(6)
    shutil.copytree(straight / "run/checkpoints" / tag_for(6), tag_dir)
    states = tag_dir / "mp_rank_00_model_states.pt"
    client = torch.load(states, weights_only=False)
    del client["bad_steps"], client["tags"]  # without the tags, the model is built from the source's weights
    del client["trainer"]["phase_updates"]  # the schedule then counted every step: phase 2's lr goes on from step 2
    torch.save(client, states)
    (tag_dir / "COMPLETE").write_text(json.dumps({"global_step": 6, "world_size": 2}))
    proc = launch(["--config", str(write_config(tmp_path / "cfg.yaml", cfg))], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resumed from {tag_for(6)}" in proc.stderr and "universal" not in proc.stderr
    want, got = read_metrics(straight / "run"), read_metrics(tmp_path / "run")
    assert sorted(got) == [7, 8]
    assert [got[s]["train/loss"] for s in (7, 8)] == [want[s]["train/loss"] for s in (7, 8)]
    a = load_checkpoint_fp32(straight / "run/checkpoints", tag_for(8))
    b = load_checkpoint_fp32(tmp_path / "run/checkpoints", tag_for(8))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_resume_refuses_another_trainable_set_in_its_phase_and_a_config_without_its_phase(straight_runs,
                                                                                            tmp_path):
    """Each is one line before any engine is built (the checkpoint was saved on 2 ranks, resumed here on 1: no
    conversion either); before 2026-12-04 DeepSpeed's loader stopped with a layout or size traceback, and a config
    without the checkpoint's phase with an IndexError."""
    straight = straight_runs(1)
    cfg = yaml.safe_load((straight / "cfg.yaml").read_text())
    cfg["optim"]["grad_accum"] = 4
    for name, tag, change, needles in (
            ("trainable", 2, lambda c: c["phases"][0].update(trainable=["@itl"]),
             ["config key 'phases[0].trainable' (['@itl']) trains 0 parameter(s) that phase 'phase1' of checkpoint "
              f"{tag_for(2)} froze and freezes 2 it trained", "set phases[0].steps=2 to end the phase"]),
            ("fewer", 6, lambda c: c.update(phases=c["phases"][:1]),
             [f"config key 'phases' lists 1 phase(s), and checkpoint {tag_for(6)} is in phase 'phase2' (phases[1]) "
              "at its step 2"])):
        run = tmp_path / name
        shutil.copytree(straight / "run/checkpoints" / tag_for(tag), run / "checkpoints" / tag_for(tag))
        mine = dict(cfg, run_dir=str(run), phases=[dict(p) for p in cfg["phases"]])
        change(mine)
        proc = launch(["--config", str(write_config(tmp_path / f"{name}.yaml", mine))], nproc=1)
        one_error_line_of(proc, *needles)
        assert "universal" not in proc.stderr and complete_tags(run / "checkpoints") == [tag_for(tag)]


def test_a_resume_under_another_zero3_sub_group_size_goes_through_a_universal_copy(straight_runs, tmp_path):
    """zero_optimization.sub_group_size decides how ZeRO-3 splits its flat partitions, which its own load copies by
    position: before 2026-12-04 a resume under another one stopped with DeepSpeed's ValueError. Per parameter,
    the universal copy resumes it on the uninterrupted run's losses and weights."""
    straight = straight_runs(3)
    cfg = yaml.safe_load((straight / "cfg.yaml").read_text())
    ds = json.loads(Path(cfg["deepspeed"]).read_text())
    ds["zero_optimization"]["sub_group_size"] = 20000
    (tmp_path / "ds.json").write_text(json.dumps(ds))
    cfg.update(deepspeed=str(tmp_path / "ds.json"), run_dir=str(tmp_path / "run"))
    shutil.copytree(straight / "run/checkpoints" / tag_for(6), tmp_path / "run/checkpoints" / tag_for(6))
    proc = launch(["--config", str(write_config(tmp_path / "cfg.yaml", cfg))], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (f"checkpoint {tag_for(6)} was saved by 2 ranks at ZeRO stage 3 in fp32 (zero_optimization.sub_group_size "
            "1000000000 -> 20000); resuming on 2 ranks at stage 3 in fp32 through a universal checkpoint"
            ) in proc.stderr
    want, got = read_metrics(straight / "run"), read_metrics(tmp_path / "run")
    assert sorted(got) == [7, 8]
    assert [got[s]["train/loss"] for s in (7, 8)] == pytest.approx([want[s]["train/loss"] for s in (7, 8)], rel=1e-6)
    a = load_checkpoint_fp32(straight / "run/checkpoints", tag_for(8))
    b = load_checkpoint_fp32(tmp_path / "run/checkpoints", tag_for(8))
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=0, atol=1e-6, msg=name)


def test_a_resume_needs_neither_the_embedding_init_nor_the_source_weights(tmp_path, tiny_roberta, corpus):
    """The checkpoint holds the word embeddings, so a resume skips model.embedding_init: here its file is gone
    after the first start, so running it again would fail. It holds every other weight too, and which of them came
    from the source: the source here is an encoder without an MLM head (a RobertaModel), whose head is new and
    trains in phase 1, and the resume, in phase 1, reads only its config.json. The resumed run still equals the
    straight one bit for bit, and logs and keeps the first start's report."""
    import numpy as np
    from transformers import RobertaModel

    from conftest import base_config
    from data_tools.embeddings.embedding_files import write_embeddings
    from data_tools.piece_tokenizers import SpmTokenizer
    from xpt_ds.checkpoint.store import read_client_state
    spm = SpmTokenizer(corpus / "spm.model")
    matrix = np.random.default_rng(0).normal(0, 0.02, (spm.vocab_size, 64)).astype(np.float32)
    path = write_embeddings(tmp_path / "emb" / "rows", matrix, {"kind": "input-embeddings",
                                                                 "tokenizer": spm.identity()})
    headless = tmp_path / "headless"
    RobertaModel.from_pretrained(tiny_roberta).save_pretrained(headless)
    model = {"source": str(headless), "tokenizer": str(corpus / "spm.model"), "method": "xpt",
             "embedding_init": "from_file", "embedding_init_args": {"path": str(path)}}
    straight = base_config(tmp_path / "straight", tiny_roberta, corpus, model=model, checkpoint={"every_steps": 1})
    straight["phases"] = [{**p, "steps": 2} for p in straight["phases"]]
    proc = launch(["--config", str(write_config(tmp_path / "straight.yaml", straight))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "embedding_init from_file:" in proc.stderr and "MLM weights" in proc.stderr  # the head is new
    tags = read_client_state(tmp_path / "straight/checkpoints", tag_for(1))["tags"]
    assert "@new" in tags["lm_head.dense.weight"] and "@source" in tags["roberta.encoder.layer.1.output.dense.weight"]
    shutil.rmtree(tmp_path / "emb")
    run = tmp_path / "run"
    shutil.copytree(tmp_path / "straight/checkpoints" / tag_for(1), run / "checkpoints" / tag_for(1))
    model = {**model, "source": str(config_only(headless, tmp_path / "config_only"))}
    proc = launch(["--config", str(write_config(tmp_path / "run.yaml", {**straight, "run_dir": str(run),
                                                                        "model": model}))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resumed from {tag_for(1)}" in proc.stderr
    assert f"not run again: the word embeddings come from checkpoint {tag_for(1)}" in proc.stderr
    assert (run / "embedding_init.json").read_text() == (tmp_path / "straight/embedding_init.json").read_text()
    want, got = read_metrics(tmp_path / "straight"), read_metrics(run)
    assert [got[s]["train/loss"] for s in (2, 3, 4)] == [want[s]["train/loss"] for s in (2, 3, 4)]
    a = load_checkpoint_fp32(tmp_path / "straight/checkpoints", tag_for(4))
    b = load_checkpoint_fp32(run / "checkpoints", tag_for(4))
    assert all(torch.equal(a[k], b[k]) for k in a)
    one, two = (load_checkpoint_fp32(tmp_path / "straight/checkpoints", tag_for(s)) for s in (1, 2))
    assert not torch.equal(one["lm_head.dense.weight"], two["lm_head.dense.weight"])  # the new head trains in phase 1


def test_a_resume_mid_log_window_logs_the_uninterrupted_mean(tiny_roberta, corpus, tmp_path):
    """log_every=3 with a checkpoint every step: a resume from step 5 is one step into the window that logs at step
    6. The checkpoint carries that step's loss (each rank's sum), so the resumed run logs the mean over steps 5
    and 6 at step 6, bit for bit the uninterrupted run's, not step 6's loss alone."""
    from conftest import base_config
    straight = base_config(tmp_path / "straight", tiny_roberta, corpus, checkpoint={"every_steps": 1},
                           deepspeed=str(Path(__file__).parents[2] / "ds_configs/zero1_fp32.json"),
                           logging={"log_every": 3, "eval_every": 0, "progress_bar": False})
    proc = launch(["--config", str(write_config(tmp_path / "straight.yaml", straight))], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    want = read_metrics(tmp_path / "straight")
    assert sorted(s for s in want if "train/loss" in want[s]) == [3, 4, 6, 8]  # 4 and 8 end a phase
    run = tmp_path / "run"
    shutil.copytree(tmp_path / "straight/checkpoints" / tag_for(5), run / "checkpoints" / tag_for(5))
    proc = launch(["--config", str(write_config(tmp_path / "run.yaml", {**straight, "run_dir": str(run)}))], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = read_metrics(run)
    assert sorted(s for s in got if "train/loss" in got[s]) == [6, 8]
    assert [got[s]["train/loss"] for s in (6, 8)] == [want[s]["train/loss"] for s in (6, 8)]

    # A requeue from step 2 that shortens phase 1 to 1 step: the phase is over where it resumes. Its window (steps
    # 1-2) is logged at step 2 as phase 1's, and its phase-end validation runs there, as at a phase's last step.
    # Before, neither: steps 1-2 were averaged into phase 2's first logged point (step 3), and no validation ran.
    short = tmp_path / "short"
    shutil.copytree(tmp_path / "straight/checkpoints" / tag_for(2), short / "checkpoints" / tag_for(2))
    shutil.copyfile(tmp_path / "straight/metrics.jsonl", short / "metrics.jsonl")
    shortened = {**straight, "run_dir": str(short), "phases": [{**straight["phases"][0], "steps": 1},
                                                               straight["phases"][1]]}
    proc = launch(["--config", str(write_config(tmp_path / "short.yaml", shortened))], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (short / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["train/phase"]) for r in rows if "train/loss" in r] == [(2, 0.0), (3, 1.0), (6, 1.0)]
    assert [r["step"] for r in rows if "valid/loss" in r] == [2, 6]


def test_a_log_window_restored_on_another_world_size_keeps_the_old_ranks_mean():
    from xpt_ds.metrics.logger import LogWindow
    window = LogWindow(torch.device("cpu"))
    window.load_state_dict({"steps": 2, "good": 2, "loss_sums": [3.0, 5.0]}, rank=0, world=1)
    window.add(torch.tensor(2.0), skipped=False)
    assert (window.steps, window.timed, window.good) == (3, 1, 3)
    assert window.mean_loss().item() == (4.0 + 2.0) / 3  # the old world's mean of steps 1-2, then step 3's
    window.load_state_dict({"steps": 2, "good": 1, "loss_sums": [3.0, 5.0]}, rank=1, world=2)
    assert window.loss_sum.item() == 5.0 and window.timed == 0


def _saved_adam(tag_dir: Path) -> tuple[list[tuple], list]:
    """(betas, eps, weight decay) of every param group, and every parameter's Adam step count, in a tag's optimizer
    files (ZeRO-1/2 and ZeRO-3 nest them differently)."""
    groups, steps = [], []

    def walk(obj):
        if isinstance(obj, dict):
            if "betas" in obj and "params" in obj:
                groups.append((tuple(obj["betas"]), obj["eps"], obj["weight_decay"]))
            if "exp_avg" in obj:
                steps.append(obj["step"])
            for v in obj.values():
                walk(v)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                walk(v)

    for path in sorted(tag_dir.glob("*optim_states.pt")):
        walk(torch.load(path, weights_only=False))
    return groups, steps


@pytest.mark.parametrize("stage", [1, 3])
def test_a_resume_with_other_optimizer_settings_applies_them_and_says_so(stage, straight_runs, tmp_path):
    """torch's load_state_dict replaces each param group by the checkpoint's: a resume with another optim.betas or
    eps went on with the saved ones, silently, and one from torch's AdamW to FusedAdam (optim.torch_adam) failed on
    the keys FusedAdam's groups need (KeyError 'bias_correction'). The run's own settings apply, to the moments and
    step counts saved, and the log says what changed. ZeRO-1: new betas, eps and peak lr, so step 8 (after the
    first update with them) differs from the straight run; ZeRO-3: FusedAdam alone, the same Adam, so the losses
    and the step counts go on as the straight run's. A changed engine JSON is said too (ZeRO-1: another bucket
    size), and an unchanged one is not."""
    straight = straight_runs(stage)
    cfg = yaml.safe_load((straight / "cfg.yaml").read_text())
    cfg["run_dir"] = str(tmp_path / "run")
    cfg["model"]["source"] = str(config_only(Path(cfg["model"]["source"]), tmp_path / "source"))
    shutil.copytree(straight / "run/checkpoints" / tag_for(6), tmp_path / "run/checkpoints" / tag_for(6))
    shutil.copy(straight / "run/config.yaml", tmp_path / "run/config.yaml")  # what ran up to step 6
    cfg["optim"]["torch_adam"] = False
    if stage == 1:
        cfg["model"].update(init_seed=99, itl_init="copy")  # only a fresh start's: kept as the checkpoint's
        cfg["optim"].update(betas=[0.5, 0.6], eps=1e-3)
        cfg["phases"][1]["lr"] = 2e-3
        engine = json.loads(Path(cfg["deepspeed"]).read_text())
        engine["zero_optimization"]["reduce_bucket_size"] = 20_000_000
        cfg["deepspeed"] = str(tmp_path / "zero1_buckets.json")
        Path(cfg["deepspeed"]).write_text(json.dumps(engine))
    proc = launch(["--config", str(write_config(tmp_path / "cfg.yaml", cfg))], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [line for line in proc.stderr.splitlines() if "with other optimizer settings or schedules" in line]
    changed = "optim.torch_adam True -> False"
    if stage == 1:
        changed = ("optim.betas [0.9, 0.98] -> [0.5, 0.6]; optim.eps 1e-06 -> 0.001; optim.torch_adam True -> False; "
                   "phases[1].lr 0.0005 -> 0.002")
    assert len(said) == 1 and f"({changed}): they apply from this step on" in said[0], proc.stderr[-3000:]
    engine_said = [line.split("resuming ", 1)[1] for line in proc.stderr.splitlines()
                   if "under other DeepSpeed engine settings" in line]
    assert engine_said == ([f"{tag_for(6)} under other DeepSpeed engine settings than it was trained with (config key "
                            f"'deepspeed', {cfg['deepspeed']}: zero_optimization.reduce_bucket_size (unset) -> "
                            "20000000): they apply from this step on"] if stage == 1 else []), engine_said
    # phase 2: 1 warmup step, then linear to 0 over 3: its third update (index 2) at 2/3 of the peak
    assert ("the next step's learning rate is 0.00133 (0.000333 by the schedule it was trained with)" in said[0]) \
        == (stage == 1), said[0]
    start_said = [line for line in proc.stderr.splitlines() if "with other start settings" in line]
    assert len(start_said) == (stage == 1), start_said
    if stage == 1:
        assert (f"resuming {tag_for(6)} with other start settings than built its weights (model.init_seed 1234 -> 99; "
                "model.itl_init 'random' -> 'copy'): they decide only") in start_said[0], start_said
        recorded = yaml.safe_load((tmp_path / "run/config.yaml").read_text())["model"]
        assert (recorded["init_seed"], recorded["itl_init"]) == (1234, "random")
    # config.yaml now holds this start's config; the one it replaced is kept, named by the step it ran up to
    kept = tmp_path / "run/config_history/step_00000006.yaml"
    assert kept.read_text() == (straight / "run/config.yaml").read_text()
    assert yaml.safe_load((tmp_path / "run/config.yaml").read_text())["optim"]["torch_adam"] is False
    assert ("config.yaml: changed since the last start; the one that ran up to here is kept as "
            "config_history/step_00000006.yaml") in proc.stderr
    want, got = read_metrics(straight / "run"), read_metrics(tmp_path / "run")
    assert got[7]["train/loss"] == want[7]["train/loss"]  # the weights of step 6, before any new update
    groups, steps = _saved_adam(tmp_path / "run/checkpoints" / tag_for(8))
    straight_groups, straight_steps = _saved_adam(straight / "run/checkpoints" / tag_for(8))
    assert all(isinstance(s, int) for s in steps), steps  # FusedAdam's own kind of count
    assert steps == [int(s) for s in straight_steps]  # the phase's 4 updates: the counts went on, not from 0
    if stage == 1:
        assert groups == [((0.5, 0.6), 1e-3, 0.01), ((0.5, 0.6), 1e-3, 0.0)] * 2, groups
        assert abs(got[8]["train/loss"] - want[8]["train/loss"]) > 1e-4
    else:
        assert groups == straight_groups
        assert got[8]["train/loss"] == pytest.approx(want[8]["train/loss"], abs=1e-5)


def test_a_zero3_bf16_resume_with_partitioned_parameters_is_bit_identical(tmp_path, tiny_roberta, corpus):
    """ZeRO-3 in bf16 (the GPU's engine config for large sources) with every parameter partitioned, as a 1-8B
    model's matrices are (a tiny model's would all stay gathered under the shipped persistence threshold, and no
    other test resumed such a run), resumed on 2 ranks mid phase 1: the frozen weights come back from the
    checkpoint's fp32 file into the ranks' partitions, kept as the values where the partitions hold them exactly (the
    source's LayerNorm weights are bf16 numbers) and as a slice of each rank's own where they do not (its random
    matrices), and the run ends on the uninterrupted run's bits."""
    ds = json.loads((REPO / "ds_configs/zero3_bf16.json").read_text())
    ds["zero_optimization"]["stage3_param_persistence_threshold"] = 0
    (tmp_path / "zero3_bf16_partitioned.json").write_text(json.dumps(ds))
    cfg = base_config(tmp_path / "straight", tiny_roberta, corpus, checkpoint={"every_steps": 2},
                      deepspeed=str(tmp_path / "zero3_bf16_partitioned.json"))
    path = write_config(tmp_path / "cfg.yaml", cfg)
    proc = launch(["--config", str(path)], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed = tmp_path / "resumed"
    shutil.copytree(tmp_path / "straight/checkpoints" / tag_for(2), resumed / "checkpoints" / tag_for(2))
    proc = launch(["--config", str(path), f"--run_dir={resumed}"], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resumed from {tag_for(2)}" in proc.stderr
    said = re.search(r"([\d,]+) frozen parameters \(([\d,]+) exact in the engine's own copy, ([\d,]+) fp32 values "
                     r"kept", proc.stderr)
    frozen, exact, kept = (int(n.replace(",", "")) for n in said.groups())
    assert 0 < exact < frozen and kept > 0, (frozen, exact, kept)
    want, got = read_metrics(tmp_path / "straight"), read_metrics(resumed)
    assert [want[s]["train/loss"] for s in range(3, 9)] == [got[s]["train/loss"] for s in range(3, 9)]
    want, got = (load_checkpoint_fp32(run / "checkpoints", tag_for(8)) for run in (tmp_path / "straight", resumed))
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
