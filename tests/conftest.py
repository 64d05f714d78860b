"""Shared fixtures: tiny source models (2 layers, hidden 64), tiny SentencePiece models, tiny shards."""
from __future__ import annotations

import contextlib
import gc
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import yaml

from processes import (  # noqa: F401  (tests import these from conftest)
    PORTS, REPO, Started, _command, free_port, kill_started, launch, rank_pids, run_main, start, start_main)
from run_files import (  # noqa: F401  (tests import these from conftest)
    logged_since, read_frozen, read_marker, read_metrics, read_phase_end, twin_of)
from tiny_decoders import OTHER_LLAMA_LAYOUT, save_tiny_decoder  # noqa: F401  (tests import these from conftest)

# experiments/ (the studies) is not installed with the package: the tests import it from this checkout, also under
# a bare `pytest`, which does not put the working directory on sys.path as `python3 -m pytest` does.
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))
# The test folders mirror the package (tests/checkpoint for xpt_ds/checkpoint, ...). A few modules share plain
# helpers (tests/trelm/test_trelm.py's parallel shards, tests/data/test_data.py's stream config): every folder is
# importable by module name, as pytest's own imports of the test files make them (their basenames are unique).
for _folder in sorted(p for p in Path(__file__).parent.iterdir() if p.is_dir() and any(p.glob("test_*.py"))):
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))
os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One intra-op thread here too: the tiny models gain nothing from more on 2 cores, and a process that never
# started an OpenMP pool can be forked safely (``run_main``).
os.environ.setdefault("OMP_NUM_THREADS", "1")

TINY = dict(vocab_size=120, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
            max_position_embeddings=80, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)


def write_synthetic_corpus(path: Path, docs: int = 40, seed: int = 0) -> Path:
    """Zipf-distributed pseudo-words from Hangul syllables: enough structure for SentencePiece and MLM."""
    rng = np.random.default_rng(seed)
    syll = [chr(0xAC00 + i) for i in rng.choice(11172, 200, replace=False)]
    words = ["".join(rng.choice(syll, rng.integers(1, 4))) for _ in range(400)]
    p = 1.0 / np.arange(1, len(words) + 1)
    p /= p.sum()
    lines = []
    for _ in range(docs):
        for _ in range(rng.integers(3, 8)):
            sent = " ".join(rng.choice(words, rng.integers(4, 14), p=p))
            lines.append(sent + ".")
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


@pytest.fixture(scope="session", autouse=True)
def temp_files_under_pytests_own(tmp_path_factory):
    """Every temporary file of the session, and of the processes it starts (TMPDIR), under pytest's base temp
    folder, which pytest prunes (it keeps the last 3 sessions'): each torchrun launch leaves a ``torchelastic_*``
    folder behind, and each multi-rank run a ``xpt_ds_said_*`` file (``xpt_ds.runtime.rank_say``), which in the
    system's /tmp would pile up with every run of the suite."""
    import tempfile
    before = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"] = tempfile.tempdir = str(tmp_path_factory.mktemp("tmpdir"))
    yield
    tempfile.tempdir = before[1]
    if before[0] is None:
        del os.environ["TMPDIR"]
    else:
        os.environ["TMPDIR"] = before[0]


@pytest.fixture(scope="session")
def corpus_text(tmp_path_factory) -> Path:
    return write_synthetic_corpus(tmp_path_factory.mktemp("text") / "corpus.txt")


def _prepare(out: Path, text: Path, family: str) -> Path:
    from data_tools.pipeline.run import prepare
    return prepare([text], out, vocab_size=200, family=family, valid=0.1, test=0.05, seed=0)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory, corpus_text) -> Path:
    """Prepared corpus with a RoBERTa-layout tokenizer (<s>=0 <pad>=1 </s>=2 <unk>=3 <mask>=4)."""
    return _prepare(tmp_path_factory.mktemp("corpus_roberta"), corpus_text, "roberta").parent


@pytest.fixture(scope="session")
def corpus_bert(tmp_path_factory, corpus_text) -> Path:
    """Prepared corpus with a BERT-layout tokenizer ([PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4)."""
    return _prepare(tmp_path_factory.mktemp("corpus_bert"), corpus_text, "bert").parent


def _save_tiny(out: Path, family: str) -> Path:
    import torch
    from transformers import (
        BertConfig,
        BertForMaskedLM,
        RobertaConfig,
        RobertaForMaskedLM,
    )

    torch.manual_seed(7)
    if family == "roberta":
        model = RobertaForMaskedLM(RobertaConfig(**TINY, pad_token_id=1, bos_token_id=0, eos_token_id=2, type_vocab_size=1))
    else:
        model = BertForMaskedLM(BertConfig(**TINY, pad_token_id=0))
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_roberta(tmp_path_factory) -> Path:
    return _save_tiny(tmp_path_factory.mktemp("tiny_roberta"), "roberta")


@pytest.fixture(scope="session")
def tiny_roberta_nodrop(tmp_path_factory, tiny_roberta) -> Path:
    """The tiny RoBERTa with dropout off, so that runs which see the same batches differ only in reduction order."""
    from transformers import AutoConfig, AutoModelForMaskedLM
    cfg = AutoConfig.from_pretrained(tiny_roberta, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    out = tmp_path_factory.mktemp("tiny_nodrop")
    AutoModelForMaskedLM.from_pretrained(tiny_roberta, config=cfg).save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    return _save_tiny(tmp_path_factory.mktemp("tiny_bert"), "bert")


@pytest.fixture(scope="session")
def tiny_decoder(tmp_path_factory):
    """(family 'gpt2' | 'llama' | 'mistral' | 'qwen2', tied) -> directory of that tiny source, made once per
    session."""
    cache: dict[tuple, Path] = {}

    def get(family: str, tied: bool, dropout: float = 0.1) -> Path:
        key = (family, tied, dropout)
        if key not in cache:
            cache[key] = save_tiny_decoder(tmp_path_factory.mktemp(f"tiny_{family}_{tied}"), family, tied, dropout)
        return cache[key]

    return get


def base_config(run_dir: Path, source: Path, corpus: Path, **sections) -> dict:
    """A small two-phase xpt run; ``sections`` replace top-level keys."""
    cfg = {
        "run_dir": str(run_dir),
        "deepspeed": str(REPO / "ds_configs/zero2_fp32.json"),
        "model": {"source": str(source), "tokenizer": str(corpus / "spm.model"), "method": "xpt"},
        "phases": [{"name": "phase1", "steps": 4, "lr": 1e-3, "warmup_steps": 1},
                   {"name": "phase2", "steps": 4, "lr": 5e-4, "warmup_steps": 1}],
        "data": {"train_shards": [f"{corpus}/manifest.json:train"], "valid_shards": [f"{corpus}/manifest.json:valid"],
                 "seq_len": 32},
        "optim": {"micro_batch_size": 2, "grad_accum": 2, "torch_adam": True},
        "checkpoint": {"every_steps": 0},
        "logging": {"log_every": 1, "eval_every": 0, "eval_batches": 2, "progress_bar": False},
    }
    cfg.update(sections)
    return cfg


def config_only(source: Path, out: Path) -> Path:
    """A copy of a model directory without its weights (only the JSON files: config, generation config): a
    resume must not read the source's weights (it makes no build plan: xpt_ds.training.trainer.Trainer)."""
    out.mkdir(parents=True)
    for f in Path(source).glob("*.json"):
        (out / f.name).write_bytes(f.read_bytes())
    return out


def one_error_line(code: int, err: str, *needles: str) -> str:
    """A command's refusal: exit status 2, no traceback, exactly one ``error:`` line holding every needle; that
    line."""
    assert code == 2, err
    assert "Traceback" not in err, err
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, err
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


def one_error_line_of(proc, *needles: str) -> str:
    """``one_error_line`` of a finished process (``subprocess.CompletedProcess``)."""
    return one_error_line(proc.returncode, proc.stderr, *needles)


def write_config(path: Path, cfg: dict) -> Path:
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture(autouse=True)
def no_shm_left():
    """After every test, no DeepSpeed CPU all-reduce buffer of a job this worker started is left in /dev/shm.

    Under the deepspeed launcher each rank creates ``/dev/shm/deepspeed_allreduce_buffer_{uid}_{addr}_{port}_{rank}``
    (64 MiB of RAM) and DeepSpeed never removes it; ``xpt_ds.runtime.distributed.init_distributed`` does. A rank
    that joins another way leaks it for good. The ports are this worker's own, so the other worker's jobs, which
    hold their files until every rank has joined, are not counted. A leak found is removed, then reported."""
    yield
    mine = {str(port) for port in PORTS}
    left = [p for p in Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_{os.getuid()}_*")
            if p.name.rsplit("_", 2)[1] in mine]  # ..._{port}_{rank}
    for p in left:
        p.unlink(missing_ok=True)
    assert not left, f"left in /dev/shm by a job of this test (or of a fixture it set up): {[p.name for p in left]}"


@pytest.fixture(autouse=True)
def no_started_job_left():
    """After every test, no job it began with ``start`` or ``start_main`` still runs: one that does is killed with
    every process below it (``kill_started``), then reported. A test that fails before it waits on its job would
    otherwise leave the job training beside the tests after it. Set up after ``no_shm_left``, so torn down before
    it: the killed job's /dev/shm buffers are then reported too."""
    yield
    left = kill_started()
    assert not left, f"still running after the test, killed: {left}"


def made_once(tmp_path_factory, name: str, make) -> Path:
    """``make(DIR)`` once per test session, whichever pytest-xdist worker asks first; the others wait on a lock
    and reuse DIR (the fixtures it is made from are byte-identical on every worker). Treat DIR as read-only:
    copy what a test changes."""
    import fcntl
    import shutil
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # shared by this session's workers
    out = root / "made_once" / name
    out.parent.mkdir(exist_ok=True)
    with open(out.parent / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / ".made").exists():
            shutil.rmtree(out, ignore_errors=True)  # an earlier try that failed
            out.mkdir()
            make(out)
            (out / ".made").touch()
    return out


@pytest.fixture(scope="session")
def straight_runs(tmp_path_factory, tiny_roberta, corpus):
    """Two-phase xpt runs, 2 ranks, fp32 + torch AdamW, a checkpoint every step; one per ZeRO stage, made once
    per session (``made_once``): ``get(stage)/run``, ``get(stage)/cfg.yaml``."""
    def get(stage: int) -> Path:
        def make(root: Path) -> None:
            cfg = base_config(root / "run", tiny_roberta, corpus, checkpoint={"every_steps": 1},
                              deepspeed=str(REPO / f"ds_configs/zero{stage}_fp32.json"))
            proc = launch(["--config", str(write_config(root / "cfg.yaml", cfg))], nproc=2)
            assert proc.returncode == 0, proc.stderr[-3000:]
        return made_once(tmp_path_factory, f"straight_z{stage}", make)

    return get


PROFILED = {"start_step": 2, "steps": 2, "every": 3, "ranks": [0, 1]}  # engine_runs' zero2_fp32: 2-3, 5-6 (warmup 4)


@pytest.fixture(scope="session")
def engine_runs(tmp_path_factory, tiny_roberta, corpus):
    """``base_config``'s two-phase run (4 + 4 steps, torch AdamW) on 2 ranks under a shipped engine config, a
    checkpoint at the end of phase 1 and at the end; one per config, made once per session (``made_once``):
    ``get("zero2_bf16")`` is its run directory. test_frozen reads the phase-1 checkpoint, test_lean_engine the
    last (the plain bf16 runs are the same run for both). In zero2_fp32's run both ranks profile steps 2-3 and
    5-6 (``PROFILED``), which must change nothing: test_profiler_run compares it with ``straight_runs(2)``'s (the
    other configs' runs do not profile: a profile cost each rank 1-2 s to write there). The run's
    stderr is ``get(ds).parent / "stderr.txt"``."""
    def get(ds: str) -> Path:
        def make(root: Path) -> None:
            cfg = base_config(root / "run", tiny_roberta, corpus, deepspeed=str(REPO / f"ds_configs/{ds}.json"),
                              checkpoint={"every_steps": 4}, **({"profile": PROFILED} if ds == "zero2_fp32" else {}))
            proc = launch(["--config", str(write_config(root / "cfg.yaml", cfg))], nproc=2)
            assert proc.returncode == 0, proc.stderr[-3000:]
            (root / "stderr.txt").write_text(proc.stderr)
        return made_once(tmp_path_factory, f"engine_{ds}", make) / "run"

    return get


LONG_STEPS = 20  # per phase: a run long enough to be signalled mid-way. The tests signal it at step 5 or 6 and it
# stopped within 2 steps (0.08-0.12 s each in the suite on the 2-core CI machine): some 30 steps to spare. With 40
# a phase the uninterrupted run's 80 steps took 7.7-11 s there, and each interrupted run did the same again.


def long_config(run_dir: Path, source: Path, corpus: Path, every: int = 10, steps: int = LONG_STEPS) -> dict:
    """Two phases of ``steps`` on 2 DataLoader workers per rank (the default), a checkpoint every ``every``: the
    run the signal and preemption tests interrupt (test_faults, test_preemption, test_slurm)."""
    cfg = base_config(run_dir, source, corpus, checkpoint={"every_steps": every})
    cfg["phases"] = [{"name": "phase1", "steps": steps, "lr": 1e-3, "warmup_steps": 1},
                     {"name": "phase2", "steps": steps, "lr": 5e-4, "warmup_steps": 1}]
    return cfg


@pytest.fixture(scope="session")
def long_reference(tmp_path_factory, tiny_roberta, corpus) -> Path:
    """``long_config`` left alone on 2 ranks (torchrun), made once per session (``made_once``): the run directory
    whose per-step losses and last checkpoint every interrupted-and-resumed ``long_config`` run must equal,
    whatever its checkpoint interval."""
    def make(root: Path) -> None:
        cfg = write_config(root / "cfg.yaml", long_config(root / "run", tiny_roberta, corpus))
        proc = launch(["--config", str(cfg)], nproc=2)
        assert proc.returncode == 0, proc.stderr[-3000:]
    return made_once(tmp_path_factory, "long_reference", make) / "run"


# Heaviest first (seconds per file on the 2-core CI machine, pytest --durations=0): under pytest-xdist's
# --dist loadfile each file runs whole on one worker, in collection order, so starting the long files first
# keeps the last minutes from running on one worker while the other idles. Files not named keep their order.
HEAVY_FIRST = [  # the files of 20 s or more, by their mean seconds in two runs of the suite (2026-12-04), most first
    "test_resume.py", "test_bench_throughput.py", "test_rescale.py", "test_slurm.py", "test_sweep.py",
    "test_decoder_train.py", "test_faults.py", "test_checkpoint_errors.py", "test_launch.py", "test_export.py",
    "test_guards.py", "test_preemption.py", "test_crash_save.py", "test_decoder_session.py", "test_hung_job.py",
    "test_finetune.py", "test_phase_graph.py", "test_bench_big_gpu.py", "test_install.py", "test_lean_engine.py",
    "test_bench_build.py", "test_trelm_phases.py", "test_sweep_stop.py", "test_finetune_decoder.py", "test_frozen.py",
    "test_static_embeddings.py", "test_early_stop_rewind.py", "test_extend_train.py", "test_document_mask.py",
    "test_build_locks.py", "test_collector.py", "test_mix_train.py", "test_session_steps.py", "test_time_budget.py"]


def pytest_sessionstart(session):
    """The collector is off while this process collects, that is while it imports every test module (as a rank of
    ``xpt_ds.cli.train`` imports, ``xpt_ds.runtime.collector``): its passes over the imports took 3.4-4.0 of a
    collection's 11.4-12.3 CPU-s on the 2-core dev VM (2026-12-05), in each of the suite's 3 workers. Not in
    pytest-xdist's controller, which collects nothing: nothing would turn it on again there."""
    if not session.config.pluginmanager.has_plugin("dsession"):
        gc.disable()


def pytest_collection_finish(session):
    """Every test module is imported now: torch, transformers and DeepSpeed, some 700,000 objects the garbage
    collector tracks, nearly none of them garbage. Frozen (``gc.freeze``), they are no longer walked by this
    worker's collector passes, nor by those of the runs it forks (``run_main``), as a rank of ``xpt_ds.cli.train``
    freezes its own imports (``xpt_ds.runtime.collector``). Then the collector is on again (``pytest_sessionstart``)."""
    gc.freeze()
    gc.enable()


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: in-file order is kept


@pytest.fixture(scope="module")
def one_thread():
    """Tiny matmuls in the test process: a second intra-op thread only adds synchronisation (the CI box has 2
    cores). Modules that train in-process request it (autouse there)."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# --- fixtures several test modules share ----------------------------------------------------------------------

SOURCE_VOCAB = 90  # the TreLM source tokenizer's size (``source_dir``)


@pytest.fixture(scope="module")
def source_dir(tmp_path_factory):
    """A tiny 4-layer BERT with a WordPiece tokenizer of SOURCE_VOCAB entries saved next to it."""
    import torch
    import transformers
    out = tmp_path_factory.mktemp("trelm_source")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *(f"w{i}" for i in range(5, SOURCE_VOCAB))]
    tokenizer = transformers.BertTokenizerFast(vocab={p: i for i, p in enumerate(vocab)}, model_max_length=78)
    tokenizer.save_pretrained(out)
    torch.manual_seed(5)
    config = transformers.BertConfig(**{**TINY, "num_hidden_layers": 4, "vocab_size": SOURCE_VOCAB}, pad_token_id=0)
    transformers.BertForMaskedLM(config).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def english(tmp_path_factory, source_dir):
    """English MLM shards in the tiny source tokenizer's ids (its words w5..w89), made by data_tools.cli.prepare
    --hf-tokenizer."""
    from data_tools.pipeline.run import prepare
    root = tmp_path_factory.mktemp("english")
    rng = np.random.default_rng(1)
    lines = []
    for _ in range(30):
        lines += [" ".join(f"w{i}" for i in rng.integers(5, SOURCE_VOCAB, rng.integers(4, 12))) + "."
                  for _ in range(rng.integers(2, 5))] + [""]
    (root / "en.txt").write_text("\n".join(lines))
    return prepare([root / "en.txt"], root / "data", hf_tokenizer=str(source_dir), valid=0.0, test=0.0, seed=0)


def write_shard(path, docs, dtype=np.uint16):
    """Written by hand from docs/shard_format.md, independently of data_tools."""
    with tarfile.open(path, "w") as tar:
        for i, doc in enumerate(docs):
            buf = io.BytesIO()
            np.save(buf, np.asarray(doc, dtype=dtype))
            info = tarfile.TarInfo(f"{path.stem}-{i:08d}.ids.npy")
            info.size = buf.tell()
            buf.seek(0)
            tar.addfile(info, buf)
    return str(path)


@pytest.fixture
def unique_shards(tmp_path):
    """5 shards (an odd number) of documents whose ids are unique to them: doc d = range(base_d, base_d + n_d)."""
    rng = np.random.default_rng(0)
    shards, docs, base = [], {}, 10
    for s in range(5):
        shard_docs = []
        for _ in range(rng.integers(3, 9)):
            n = int(rng.integers(1, 60))
            shard_docs.append(np.arange(base, base + n))
            docs[base] = n
            base += n
        shards.append(write_shard(tmp_path / f"train-{s:06d}.tar", shard_docs))
    return shards, docs


@pytest.fixture
def sweep_config(tmp_path, tiny_roberta, corpus):
    cfg = base_config(tmp_path / "unused", tiny_roberta, corpus,
                      phases=[{"name": "phase1", "steps": 2, "lr": 1e-3}, {"name": "phase2", "steps": 2, "lr": 5e-4}])
    cfg["data"].update(valid_shards=[], num_workers=0)
    return write_config(tmp_path / "base.yaml", cfg), [f"{corpus}/manifest.json:test"]


@pytest.fixture(scope="session")
def xpt_model(tmp_path_factory, tiny_roberta, corpus) -> Path:
    """A real XPT export: two phases of post-training by ``xpt_ds.cli.train``, then ``xpt_ds.cli.export`` (made once
    per test process; its users copy it before they change it)."""
    return _trained_export(tmp_path_factory.mktemp("xpt"), tiny_roberta, corpus)


@pytest.fixture(scope="session")
def xpt_decoder_model(tmp_path_factory, tiny_decoder, corpus) -> Path:
    """``xpt_model`` from a tiny untied Llama: a stock ``LlamaForCausalLM`` of 4 layers and its tokenizer."""
    return _trained_export(tmp_path_factory.mktemp("xpt_decoder"), tiny_decoder("llama", False), corpus)


def _trained_export(root: Path, source: Path, corpus: Path) -> Path:
    from xpt_ds.cli.export import main as export_main
    cfg = base_config(root / "run", source, corpus, deepspeed=str(REPO / "ds_configs/zero1_fp32.json"))
    cfg["phases"] = [{"name": "phase1", "steps": 2, "lr": 1e-3}, {"name": "phase2", "steps": 2, "lr": 5e-4}]
    cfg["logging"].update(tensorboard=False)
    proc = launch(["--config", str(write_config(root / "cfg.yaml", cfg))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert export_main(["--run", str(root / "run"), "--out", str(root / "model")]) == 0
    return root / "model"


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str):
    """A real small filesystem (tmpfs of ``size``, "1m") mounted at ``path`` (made here) for the block; the test is
    skipped where that needs what this machine does not give (root, ``mount``)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root and `mount -t tmpfs` for a real small filesystem")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)
