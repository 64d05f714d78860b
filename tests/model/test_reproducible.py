"""Every random parameter comes from ``model.init_seed``: two fresh runs from a source without an MLM head
(whose head ``from_pretrained`` fills in) give the same losses and the same exported tensors, bit for bit; and
every rank of a job starts from rank 0's weights. That the ranks of a 2-rank job from such a source draw the same
weights in the first place is checked in test_embedding_init's 2-rank run (``frequency_rank`` rows as well)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from conftest import TINY, base_config, free_port, launch, write_config
from xpt_ds.cli.export import main as export_main

pytestmark = pytest.mark.multiproc


@pytest.fixture(scope="module")
def headless_bert(tmp_path_factory) -> Path:
    """A BertModel checkpoint: encoder only, so the MLM head is missing and drawn at load time."""
    from transformers import BertConfig, BertModel
    out = tmp_path_factory.mktemp("headless_bert")
    torch.manual_seed(3)
    BertModel(BertConfig(**TINY, pad_token_id=0)).save_pretrained(out)
    return out


def _losses(run: Path) -> list[float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["train/loss"] for r in rows if "train/loss" in r]


def _run(d: Path, source: Path, corpus: Path) -> subprocess.CompletedProcess:
    d.mkdir(parents=True, exist_ok=True)
    cfg = base_config(d / "run", source, corpus)
    cfg["phases"] = [{**p, "steps": 2} for p in cfg["phases"]]
    return launch(["--config", str(write_config(d / "run.yaml", cfg))], 1, 400,
                  env={"MASTER_PORT": str(free_port())})


def test_two_fresh_runs_from_a_headless_source_are_bit_identical(tmp_path, headless_bert, corpus_bert):
    exported = []
    losses = []
    for name in ["a", "b"]:
        proc = _run(tmp_path / name, headless_bert, corpus_bert)
        assert proc.returncode == 0, proc.stderr[-3000:]
        losses.append(_losses(tmp_path / name / "run"))
        assert export_main(["--run", str(tmp_path / name / "run"), "--out", str(tmp_path / name / "model")]) == 0
        exported.append(load_file(tmp_path / name / "model" / "model.safetensors"))
    assert len(losses[0]) == 4 and losses[0] == losses[1]
    for tag in ("global_step000000002", "global_step000000004"):  # every generator's state, Python's and numpy's too
        a, b = (tmp_path / name / "run/checkpoints" / tag / "rank_state_00000.pt" for name in ("a", "b"))
        assert a.read_bytes() == b.read_bytes(), tag
    assert exported[0].keys() == exported[1].keys()
    differ = [k for k in exported[0] if not torch.equal(exported[0][k], exported[1][k])]
    assert not differ, differ


AGREE = r'''
import sys, torch, deepspeed
from torch import nn
from xpt_ds.checkpoint.frozen import FrozenWeights
from xpt_ds.training.fill import Digest, agree_or_broadcast, engine_values, fill
deepspeed.init_distributed(dist_backend="gloo")
rank = deepspeed.comm.get_rank()


class Model(nn.Module):  # a trainable matrix and a frozen vector, no values yet
    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(torch.empty(4, 3))
        self.b = nn.Parameter(torch.empty(5), requires_grad=False)


def reference(name):
    return torch.randn(4, 3, generator=torch.Generator().manual_seed(0)) if name == "a" else torch.arange(5.0)


def values(name):
    value = reference(name)
    if rank == 1 and name == "a":
        value[1, 2] += 1.0  # one rank built different weights
    return value


model = Model()
config = {"train_batch_size": 2, "train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": int(sys.argv[1])},
          "zero_allow_untested_optimizer": True, "zero_force_ds_cpu_optimizer": False}
engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW([model.a], lr=0.0), config=config)
frozen, digest = FrozenWeights(), Digest()
fill(engine, values, {"a"}, frozen, "test", digest=digest)
agree_or_broadcast(engine, values, {"a"}, frozen, digest)
got = engine_values(engine, frozen)  # the masters and the frozen record: rank 0's values, everywhere
assert all(torch.equal(got(n), reference(n)) for n in ("a", "b")), rank
print(f"rank {rank} agrees")
engine.destroy()  # as the trainer ends a phase: ZeRO-3's hooks and handles go before the process group does
torch.distributed.barrier()
torch.distributed.destroy_process_group()
# as xpt-ds's commands end: without the C++ static destructors, where a 2-rank ZeRO-3 exit once aborted
# ("terminate called without an active exception", 2026-11-30)
from xpt_ds.runtime.process_exit import exit_process
exit_process(0)
'''


@pytest.mark.parametrize("stage", [2, 3])
def test_a_rank_with_different_weights_gets_rank_0s(tmp_path, stage):
    """xpt_ds.training.fill on a real 2-rank engine: the ranks' crc32s differ, so rank 0's values are broadcast and
    filled again, into the masters (ZeRO-2's partitions, ZeRO-3's) and the frozen record alike."""
    script = tmp_path / "agree.py"
    script.write_text(AGREE)
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "TORCHDYNAMO_DISABLE": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                           str(free_port()), str(script), str(stage)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("agrees") == 2
    assert "initial weights differ from rank 0's on rank(s) 1" in proc.stderr
