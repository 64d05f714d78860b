"""``xpt-ds train --print-config``: the resolved, checked config as YAML, and nothing else done."""
import yaml

from xpt_ds.config import TrainConfig, load_config, to_dict


def test_print_config_prints_what_the_run_saves_and_touches_nothing(tmp_path, capsys):
    """``xpt-ds train --print-config``: every key, resolved and checked, as YAML; printed again from that file it is
    the same text; no run directory, no process group; a bad key is the usual one-line error."""
    from xpt_ds.train import main
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
