"""``xpt-ds train --print-config``: the resolved, checked config as YAML, and nothing else done."""
import yaml

from xpt_ds.config import TrainConfig, load_config, to_dict
from xpt_ds.config.manager import config_yaml


def test_print_config_prints_what_the_run_saves_and_touches_nothing(tmp_path, capsys):
    """``xpt-ds train --print-config``: every key, resolved and checked, as YAML; printed again from that file it is
    the same text; no run directory, no process group; a bad key is the usual one-line error."""
    from xpt_ds.cli.train import main
    run = tmp_path / "run"
    args = ["--print-config", f"--run_dir={run}", "--model.source=FacebookAI/roberta-base",
            "--model.tokenizer=spm.model",
            "--data.train_shards=[data/manifest.json:train]", "--phases=[{name: p1, steps: 10, lr: 1.0e-4}]"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    data = yaml.safe_load(printed)
    assert data["phases"][0]["steps"] == 10 and data["model"]["source"] == "FacebookAI/roberta-base"
    assert set(data) == set(to_dict(TrainConfig()))  # every section and top-level key
    assert data == to_dict(load_config(None, args[1:]))  # what the run writes to RUN_DIR/config.yaml
    (tmp_path / "c.yaml").write_text(printed)
    assert main(["--print-config", "--config", str(tmp_path / "c.yaml")]) == 0
    assert capsys.readouterr().out == printed
    assert not run.exists()
    assert main([*args, "--optim.micro_batch_size=0"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.strip().startswith("error: config key 'optim.micro_batch_size'"), out.err


def test_print_config_without_a_runnable_config_is_a_config_to_start_from(tmp_path, capsys):
    """``xpt-ds train --print-config`` alone: every key, the required ones saying what to write there, the
    method's phases written out, one stderr line naming what to fill in; filled in, it loads as a run's config."""
    from xpt_ds.config.template import SOURCE
    from xpt_ds.cli.train import main
    assert main(["--print-config"]) == 0
    out = capsys.readouterr()
    data = yaml.safe_load(out.out)
    assert data["model"]["source"] == SOURCE and data["model"]["method"] == "xpt"
    assert [(p["name"], p["steps"]) for p in data["phases"]] == [("phase1", 0), ("phase2", 0)]
    assert out.err.splitlines() == [
        "a config to start from, not yet one to run: fill in model.source, model.tokenizer, data.train_shards, "
        "phases[0].steps, phases[1].steps (every other key is checked; the source, tokenizer, shards and DeepSpeed "
        "JSON are read when a run starts)"]
    (tmp_path / "start.yaml").write_text(out.out)
    assert main(["--print-config", "--config", str(tmp_path / "start.yaml")]) == 0
    assert capsys.readouterr().out == out.out  # the template reads back as itself
    filled = ["--model.source=FacebookAI/roberta-base", "--model.tokenizer=spm.model",
              "--data.train_shards=[data/manifest.json:train]", "--phases.0.steps=100", "--phases.1.steps=200"]
    assert main(["--print-config", "--config", str(tmp_path / "start.yaml"), *filled]) == 0
    out = capsys.readouterr()
    assert out.err == "" and out.out == config_yaml(load_config(str(tmp_path / "start.yaml"), filled))
    assert main(["--print-config", "--model.method=scratch", "--optim.micro_batch_size=0"]) == 2  # still checked
    out = capsys.readouterr()
    assert out.out == "" and out.err.strip() == "error: config key 'optim.micro_batch_size' must be >= 1, got 0"


def test_print_config_template_of_trelm_fills_the_shards_its_objectives_read(tmp_path, capsys):
    """TreLM's preset graph trains English MLM and CdLM: the template names their data keys too, and reads back
    as itself."""
    from xpt_ds.config.template import OBJECTIVE_SHARDS
    from xpt_ds.cli.train import main
    assert main(["--print-config", "--model.method=trelm"]) == 0
    out = capsys.readouterr()
    data = yaml.safe_load(out.out)
    assert {k: data["data"][k] for k in OBJECTIVE_SHARDS} == {k: [v] for k, v in OBJECTIVE_SHARDS.items()}
    assert "data.source_shards, data.parallel_shards, phases[0].steps" in out.err, out.err
    (tmp_path / "trelm.yaml").write_text(out.out)
    assert main(["--print-config", "--config", str(tmp_path / "trelm.yaml")]) == 0
    assert capsys.readouterr().out == out.out


def _template(main, capsys, *args) -> tuple[str, dict]:
    assert main(["--print-config", *args]) == 0
    out = capsys.readouterr().out
    return out, yaml.safe_load(out)


def test_print_config_template_without_cuda_gets_the_cpu_engine(tmp_path, capsys, monkeypatch):
    """Without CUDA a template's engine is ZeRO-1 fp32 with torch AdamW, above it the lines that say why and what a
    GPU run uses; it reads back as itself. An engine the command line or the file names, and a config to run,
    keep theirs (what the run will use)."""
    import torch

    from xpt_ds.config.template import CPU_ENGINE
    from xpt_ds.cli.train import main
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out, data = _template(main, capsys)
    assert (data["deepspeed"], data["optim"]["torch_adam"]) == (CPU_ENGINE, True)
    lines = out.splitlines()
    at = lines.index(f"deepspeed: {CPU_ENGINE}")
    assert lines[at - 3] == ("# No CUDA here: the CPU engine, ds_configs/zero1_fp32.json with optim.torch_adam: "
                             "true (fp32, torch AdamW).")
    assert lines[at - 2].startswith("# The default, bf16 with DeepSpeed's FusedAdam, steps ~")
    assert lines[at - 1].endswith(f"A GPU run uses {TrainConfig().deepspeed} with optim.torch_adam: false.")
    (tmp_path / "start.yaml").write_text(out)
    assert _template(main, capsys, "--config", str(tmp_path / "start.yaml"))[0] == out
    named = f"--deepspeed={TrainConfig().deepspeed}"
    out, data = _template(main, capsys, named)
    assert (data["deepspeed"], data["optim"]["torch_adam"]) == (TrainConfig().deepspeed, False) and "#" not in out
    assert _template(main, capsys, "--optim.torch_adam=false")[1]["deepspeed"] == TrainConfig().deepspeed
    runnable = ["--model.source=src", "--model.tokenizer=spm.model", "--data.train_shards=[m.json:train]",
                "--phases=[{name: p1, steps: 10, lr: 1.0e-4}]"]
    out, data = _template(main, capsys, *runnable)
    assert data["deepspeed"] == TrainConfig().deepspeed and out == config_yaml(load_config(None, runnable))


def test_print_config_template_with_cuda_keeps_bf16_and_fused_adam(capsys, monkeypatch):
    import torch

    from xpt_ds.cli.train import main
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    out, data = _template(main, capsys)
    assert (data["deepspeed"], data["optim"]["torch_adam"]) == (TrainConfig().deepspeed, False) and "#" not in out


def test_a_bf16_engine_on_the_cpu_is_one_warning_line(caplog):
    """A run whose engine trains in bf16 on the CPU says so once, with the measured factor, and goes on with it;
    fp32 engines say nothing, whichever optimizer (FusedAdam measured no slower there than torch AdamW)."""
    import logging

    from xpt_ds.config.template import CPU_SPEEDUP
    from xpt_ds.training.engine import check_device_support, load_ds_config
    with caplog.at_level(logging.WARNING, logger="xpt_ds.training.engine"):
        for name in ("zero2_bf16", "zero1_fp32", "zero2_fp32", "zero3_fp32"):
            check_device_support(load_ds_config(f"ds_configs/{name}.json"), f"ds_configs/{name}.json")
    assert [r.getMessage() for r in caplog.records] == [
        f"DeepSpeed JSON ds_configs/zero2_bf16.json trains in bf16 on the CPU: the demo's setup steps ~{CPU_SPEEDUP}x "
        "as fast with ds_configs/zero1_fp32.json and optim.torch_adam: true on a CPU without bf16 instructions "
        "(docs/config.md, On CPU)"]
    assert CPU_SPEEDUP >= 2
