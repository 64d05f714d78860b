"""Installed as a user installs it: a wheel built from the project's files, installed into a fresh venv, runs
``--help`` of every entry point and console command (``xpt-ds``, ``xpt-data`` and each subcommand) and a tiny
prepare + train + export through them from a directory outside the checkout, with an engine config named by its
shipped name."""
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from conftest import REPO, TINY, free_port, write_synthetic_corpus

pytestmark = pytest.mark.multiproc

SOURCES = ["xpt_ds", "data_tools", "ds_configs", "setup.cfg", "pyproject.toml", "README.md"]


def _sh(cmd: list[str], cwd: Path, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A venv holding the wheel; the heavy dependencies (torch, deepspeed, ...) come from the system site."""
    d = tmp_path_factory.mktemp("install")
    src = d / "src"
    src.mkdir()
    for name in SOURCES:  # the project's own files, without this checkout's build leftovers
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(REPO / name, src / name)
    _sh([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(d / "dist"),
         str(src)], d)
    wheel = next((d / "dist").glob("xpt_ds-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "xpt_ds/cli/train.py" in names and "xpt_ds/__init__.py" in names and "data_tools/cli/prepare.py" in names
    assert "ds_configs/zero2_fp32.json" in names
    _sh([sys.executable, "-m", "venv", "--system-site-packages", str(d / "venv")], d)
    _sh([str(d / "venv/bin/python"), "-m", "pip", "install", "--no-deps", "-q", str(wheel)], d)
    return d / "venv"


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "TORCHDYNAMO_DISABLE": "1",
            "MASTER_PORT": str(free_port())}


def test_the_wheel_is_what_runs_outside_the_checkout(venv, tmp_path):
    py = str(venv / "bin/python")
    where = _sh([py, "-c", "import xpt_ds, data_tools, ds_configs; print(xpt_ds.__file__, ds_configs.__file__)"],
                tmp_path, _env()).stdout
    assert all(str(venv) in p for p in where.split()), where
    for module in ["xpt_ds.cli.train", "xpt_ds.cli.export", "xpt_ds.cli.evaluate", "xpt_ds.cli.probe",
                   "xpt_ds.cli.finetune", "xpt_ds.cli.sweep", "data_tools.cli.prepare"]:
        proc = _sh([py, "-X", "importtime", "-m", module, "--help"], tmp_path, _env())
        assert "usage:" in proc.stdout
        # --help answers at once: none of the imports that take seconds (a login node, a typo'd flag)
        imported = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
                    if line.startswith("import time:")}
        assert "xpt_ds" in imported or "data_tools" in imported, proc.stderr[-500:]
        heavy = {"torch", "transformers", "deepspeed"} & imported
        assert not heavy, (module, heavy)


def test_console_commands_and_every_subcommand(venv, tmp_path):
    """``xpt-ds`` and ``xpt-data`` as pip installed them (setup.cfg's entry points), outside the checkout."""
    from data_tools.cli import COMMANDS as DATA_COMMANDS
    from xpt_ds.cli import COMMANDS
    for script, commands in [("xpt-ds", COMMANDS), ("xpt-data", DATA_COMMANDS)]:
        exe = str(venv / "bin" / script)
        listing = _sh([exe, "--help"], tmp_path, _env()).stdout
        for name in commands:
            assert name in listing, (script, name)
            assert "usage:" in _sh([exe, name, "--help"], tmp_path, _env()).stdout, (script, name)
        bad = subprocess.run([exe, "no-such-command"], cwd=tmp_path, env=_env(), capture_output=True, text=True)
        assert bad.returncode == 2 and bad.stderr.strip().startswith("error: unknown command"), bad.stderr


def test_a_tiny_run_from_another_directory(venv, tmp_path):
    from transformers import BertConfig, BertForMaskedLM
    py = str(venv / "bin/python")
    BertForMaskedLM(BertConfig(**TINY, pad_token_id=0)).save_pretrained(tmp_path / "source")
    write_synthetic_corpus(tmp_path / "text.txt", docs=30)
    _sh([str(venv / "bin/xpt-data"), "prepare", "--input", "text.txt", "--out", "data", "--vocab-size", "200",
         "--family", "bert", "--valid", "0.1", "--test", "0.1", "--workers", "1", "--quiet"], tmp_path, _env())
    cfg = {"run_dir": "run", "deepspeed": "ds_configs/zero1_fp32.json",  # the shipped config, by name
           "model": {"source": "source", "tokenizer": "data/spm.model"},
           "phases": [{"name": "p1", "steps": 2, "lr": 1e-3}, {"name": "p2", "steps": 2, "lr": 1e-3}],
           "data": {"train_shards": ["data/manifest.json:train"], "valid_shards": ["data/manifest.json:valid"],
                    "seq_len": 32},
           "optim": {"micro_batch_size": 2, "torch_adam": True},
           "logging": {"log_every": 1, "eval_every": 0, "progress_bar": False}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    _sh([str(venv / "bin/xpt-ds"), "train", "--config", "run.yaml"], tmp_path, _env())
    _sh([py, "-m", "xpt_ds", "export", "--run", "run", "--out", "model"], tmp_path, _env())
    assert (tmp_path / "model/model.safetensors").is_file() and (tmp_path / "model/tokenizer.json").is_file()
