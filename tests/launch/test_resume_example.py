"""launch/resume_example.sh resume TAG checks TAG as the trainer's --resume resolves it (xpt_ds.checkpoint.tags):
`best` (RUN_DIR/best.json's tag) was refused as "not a complete checkpoint", though the trainer and `export OUT best`
take it. LAUNCH is a stand-in that prints what it was given."""
import json
import os
import subprocess

import pytest

from conftest import REPO


def _run_dir(tmp_path, best: bool = True):
    run = tmp_path / "run"
    for step, complete in ((4, True), (8, True), (12, False)):
        tag = run / "checkpoints" / f"global_step{step:09d}"
        tag.mkdir(parents=True)
        if complete:
            (tag / "COMPLETE").write_text(json.dumps({"global_step": step, "world_size": 1, "zero_stage": 2}))
    if best:
        (run / "best.json").write_text(json.dumps({"tag": "global_step000000004", "step": 4, "valid_loss": 5.1}))
    return run


def _resume(tmp_path, run, *args) -> subprocess.CompletedProcess:
    launch = tmp_path / "launch.sh"
    launch.write_text('echo "LAUNCH $*"\n')
    env = {**os.environ, "CONFIG": str(REPO / "launch/configs/demo.yaml"), "RUN_DIR": str(run), "LAUNCH": str(launch)}
    return subprocess.run(["bash", str(REPO / "launch/resume_example.sh"), "resume", *args], env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("tag,says", [("best", "best (global_step000000004)"),
                                      ("global_step000000008", "global_step000000008"),
                                      ("auto", "auto (global_step000000008)")])
def test_resume_takes_what_the_trainer_takes(tmp_path, tag, says):
    run = _run_dir(tmp_path)
    done = _resume(tmp_path, run, tag, "--optim.lr=1e-4")
    assert done.returncode == 0, done.stderr  # best: "'best' is not a complete checkpoint in ..." (exit 2)
    assert done.stdout == f"LAUNCH --resume {tag} --optim.lr=1e-4\n"
    assert done.stderr == f"resuming {run} from {says}\n"


@pytest.mark.parametrize("tag,error", [
    ("global_step000000012", "resume 'global_step000000012' is not a complete checkpoint of run RUN (an incomplete "
                             "save: no COMPLETE marker); valid: auto, none, or a complete checkpoint: "
                             "global_step000000008, global_step000000004"),
    ("best", "resume best: run RUN records no best checkpoint (RUN/best.json is missing: checkpoint.keep_best was "
             "off, or no validation pass has run); valid: auto, none, or a complete checkpoint: "
             "global_step000000008, global_step000000004"),
])
def test_resume_refuses_what_the_trainer_refuses_in_one_line(tmp_path, tag, error):
    run = _run_dir(tmp_path, best=False)
    done = _resume(tmp_path, run, tag)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"resume_example.sh: {error.replace('RUN', str(run))}\n"
