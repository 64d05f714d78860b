"""launch/session_steps.sh, the step runner of the unattended GPU scripts (benchmarks/gpu_session.sh,
launch/gpu_uagec.sh, launch/gpu_decoder.sh): under BUDGET_S a step that would not fit is skipped, and one that
overruns is stopped with every process it started, so a device call still ends with its results packed; and the
payload those scripts read, cut into slices a device call can carry and joined on the machine."""
import subprocess
import time

from conftest import REPO


def _run(tmp_path, script: str, budget: str | None) -> tuple[subprocess.CompletedProcess, float]:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    prefix = f"OUT={out}; " + ("" if budget is None else f"BUDGET_S={budget}; ")
    t0 = time.monotonic()
    proc = subprocess.run(["bash", "-c", f"{prefix}source {REPO}/launch/session_steps.sh; {script}"],
                          capture_output=True, text=True, timeout=120)
    return proc, time.monotonic() - t0


def _steps(tmp_path) -> list[list[str]]:
    return [line.split("\t") for line in (tmp_path / "out" / "steps.tsv").read_text().splitlines()]


def test_a_step_that_overruns_the_budget_is_stopped_with_its_children(tmp_path):
    late = tmp_path / "late"
    # the step's grandchild would write `late` after 6 s; the budget ends after 3 (1 s was spent before the first
    # step started on a loaded CI machine, which then skipped it)
    script = (f"budget_step slow 0 bash -c 'bash -c \"sleep 6; touch {late}\" & wait'; echo after=$?; "
              "budget_step quick 0 true; echo quick=$?")
    proc, seconds = _run(tmp_path, script, "3")
    assert seconds < 6, proc.stdout + proc.stderr
    time.sleep(6.5 - seconds)  # past the grandchild's 6 s, had it survived
    assert not late.exists()
    assert "after=124" in proc.stdout
    rows = _steps(tmp_path)
    assert rows[0][:2] == ["slow", "124"] and int(rows[0][2]) <= 4
    # nothing is left of the budget: the next step is skipped, not run, and the script goes on
    assert rows[1][:2] == ["quick", "skip"] and "quick=0" in proc.stdout
    assert "quick: skipped" in (tmp_path / "out" / "session.log").read_text()


def test_a_step_that_needs_more_than_is_left_is_skipped_and_one_that_fits_runs(tmp_path):
    proc, _ = _run(tmp_path, f"budget_step big 50 touch {tmp_path}/big; RESERVE_S=5 budget_step small 10 bash -c 'echo hi; exit 3';"
                             " echo small=$?", "30")
    assert _steps(tmp_path)[0][:2] == ["big", "skip"] and not (tmp_path / "big").exists()
    assert _steps(tmp_path)[1][:2] == ["small", "3"] and "small=3" in proc.stdout  # its own exit code
    assert (tmp_path / "out" / "small.log").read_text() == "hi\n"
    assert "budget_left=1000000" in _run(tmp_path, "echo budget_left=$(budget_left 10)", None)[0].stdout
    # 30 - 10 less the whole seconds bash has counted since it started (1 or more on a loaded machine)
    proc, seconds = _run(tmp_path, "echo left=$(budget_left 10)", "30")
    left = int(proc.stdout.strip().removeprefix("left="))
    assert 20 - int(seconds) - 1 <= left <= 20, (proc.stdout, seconds)


def test_a_child_that_checkpoints_on_sigterm_gets_its_grace_and_a_stubborn_one_is_killed(tmp_path):
    """As a sweep stopped at the budget's end: the sweep dies at SIGTERM, its trainer saves first (here 1 s), and
    budget_run returns only once it has; a child that ignores SIGTERM is killed after GRACE_S."""
    saved, stubborn = tmp_path / "saved", tmp_path / "stubborn"
    ready = [tmp_path / "trainer_ready", tmp_path / "ignorer_ready"]
    # Each child says when its trap is set: the budget (3 s, of which bash's whole-second SECONDS may take 1) has
    # to outlast their start, which took over a second on a loaded CI machine when the budget was 1 s.
    trainer = f"trap 'sleep 1; touch {saved}; exit 0' TERM; touch {ready[0]}; while :; do sleep 0.1; done"
    ignorer = f"trap '' TERM; touch {ready[1]}; sleep 7; touch {stubborn}"
    script = (f"GRACE_S=2 budget_step sweep 0 bash -c \"bash -c \\\"{trainer}\\\" & bash -c \\\"{ignorer}\\\" & "
              f"sleep 60\"; echo sweep=$?; ls {tmp_path}")
    proc, seconds = _run(tmp_path, script, "3")
    assert "sweep=124" in proc.stdout, proc.stdout + proc.stderr
    assert all(r.exists() for r in ready), "a child had not set its trap when the budget ended"
    assert saved.exists() and "saved" in proc.stdout  # the trainer's save ended before budget_run returned
    assert seconds < 7
    time.sleep(7.5 - seconds)
    assert not stubborn.exists()  # killed after the grace, not left to write later


def test_without_a_budget_a_step_runs_to_its_end(tmp_path):
    proc, _ = _run(tmp_path, "budget_step slow 1000000 bash -c 'sleep 1; exit 0'", None)
    assert proc.returncode == 0 and _steps(tmp_path)[0][:2] == ["slow", "0"]


def test_budget_run_inside_a_shell_function_and_with_nothing_left(tmp_path):
    """launch/gpu_uagec.sh's sweeps are shell functions that call budget_run themselves, under plain step."""
    script = ("f() { budget_run bash -c 'sleep 30'; }; step f f; echo f=$?; sleep 1; "
              "budget_run touch never; echo none=$?")
    proc, seconds = _run(tmp_path, script, "1")
    assert seconds < 10 and "f=124" in proc.stdout and "none=124" in proc.stdout
    assert not (tmp_path / "never").exists() and "no time left in the budget for: touch never" in proc.stderr


def test_gpu_uagec_dry_run_says_what_each_sweep_would_do_and_writes_nothing(tmp_path, source_dir, corpus_bert):
    """``launch/gpu_uagec.sh OUT --dry-run`` (docs/testing.md's step 0 before a GPU session) on a payload of the
    test fixtures: the GPU's five sweeps say their plans (every run new here: 32 + 6 + 2 + 2 + 4) with the GPU's
    settings, and OUT holds only what it held (no steps.tsv, logs, base configs or arm configs). No interpreter
    it starts imports torch, DeepSpeed or transformers (a dry run reads configs, manifests and label files), so
    it says all this in seconds on any login node."""
    import hashlib
    import os
    import re
    import shutil

    import numpy as np
    payload = tmp_path / "xpt_payload" / "payload"
    shutil.copytree(source_dir, payload / "source")
    for name in ("uk", "uk_src", "en_src", "parallel"):  # the shard paths are read only when a run starts
        shutil.copytree(corpus_bert, payload / name)
    (payload / "emb").mkdir()
    np.save(payload / "emb/uk_on_minilm.npy", np.zeros((8, 4), dtype=np.float32))
    (payload / "labels").mkdir()
    for name in ("finetune_train", "test"):
        (payload / f"labels/{name}.jsonl").write_text('{"text": "a", "label": "0"}\n{"text": "b", "label": "1"}\n')
    out = tmp_path / "gu"
    (out / "main").mkdir(parents=True)
    (out / "main/results.jsonl").write_text("")

    def files():
        return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.rglob("*") if p.is_file()}

    before = files()
    proc = subprocess.run(["bash", str(REPO / "launch/gpu_uagec.sh"), str(out), "--dry-run", "--payload",
                           str(payload.parent)], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"})  # every import: "import time: ..."
    lines = (proc.stdout + proc.stderr).splitlines()  # a dry run's steps print "NAME: " and their stderr
    imported = {m[1] for line in lines if (m := re.search(r"import time:.*\|\s*(\S+)\s*$", line))}
    said = [line for line in proc.stdout.splitlines() if "import time:" not in line]
    assert proc.returncode == 0, "\n".join(said)[-3000:] + proc.stderr[-3000:]
    assert "xpt_ds.sweeps.plan" in imported  # the sweeps' imports are in the output
    assert not imported & {"torch", "deepspeed", "transformers"}
    for sweep, runs in (("sweep_main", 32), ("sweep_init", 6), ("sweep_other_trelm", 2),
                        ("sweep_other_keep_vocab", 2), ("sweep_rewind", 4)):
        assert f"{sweep}: dry run: {runs} of {runs} runs would start; nothing was changed in {out / sweep[6:]}" \
            in said, "\n".join(said)[-3000:]
    assert "sweep_main: would run scratch 600K seed 1: 6000 steps on 600,000 tokens" in said
    assert "sweep_rewind: would run xpt_rewind 75K seed 1: 6000 steps on 75,000 tokens" in said  # the two smallest
    assert not any(line.startswith("sweep_rewind: would run xpt_rewind 300K") for line in said)
    assert files() == before and sorted(p.name for p in out.iterdir()) == ["main"]


def test_a_payload_sliced_for_the_device_calls_unpacks_whole_and_a_bad_slice_is_refused(tmp_path):
    """slice_payload cuts a payload into slices a device call can carry (PART_MB MiB each); unpack_payload joins
    the parts wherever the calls left them, checks the sha256 that came with part1 and unpacks once; a slice that
    changed on the way is refused in one line, nothing unpacked."""
    import os
    import shutil
    stage = tmp_path / "stage"
    (stage / "payload/source").mkdir(parents=True)
    data = os.urandom(int(2.5 * 2**20))  # random: gzip keeps it 2.5 MiB, so 3 slices of 1 MiB
    (stage / "payload/source/config.json").write_bytes(data)
    script = f"source {REPO}/launch/session_steps.sh; cd {tmp_path}; PART_MB=1 slice_payload {stage} parts"
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "packed 3 part(s) in parts" in proc.stdout
    assert sorted(p.relative_to(tmp_path / "parts").as_posix() for p in (tmp_path / "parts").rglob("slice*")) == [
        "part1/slice0", "part2/slice1", "part3/slice2"]
    shutil.copytree(tmp_path / "parts", tmp_path / "machine")  # where the calls leave them: /tmp/xpt_payload
    unpack = f"source {REPO}/launch/session_steps.sh; PAYLOAD={tmp_path}/machine unpack_payload source/config.json"
    proc = subprocess.run(["bash", "-c", unpack], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "machine/payload/source/config.json").read_bytes() == data
    (tmp_path / "machine/part3/slice2").write_bytes(b"changed")  # unpacked already: the marker spares the check
    assert subprocess.run(["bash", "-c", unpack], timeout=60).returncode == 0
    shutil.rmtree(tmp_path / "machine/payload")
    proc = subprocess.run(["bash", "-c", unpack], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and not (tmp_path / "machine/payload").exists()
    assert proc.stderr.startswith(f"payload in {tmp_path}/machine: sha256 ") and proc.stderr.count("\n") == 1
