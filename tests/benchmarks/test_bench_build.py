"""benchmarks/bench_build.py keeps working: its whole sequence (a source written in the hub's layout, the
two-phase run stopped after the hand-over, the resume, the export, the peer's from_pretrained) on a tiny shape,
one rank. CPU numbers of a tiny model are no measurement; this checks the rows are complete."""
import json
import subprocess
import sys

import pytest

from conftest import REPO

pytestmark = pytest.mark.multiproc


def test_bench_build_runs_through_on_a_tiny_shape(tmp_path, corpus):
    proc = subprocess.run([sys.executable, "benchmarks/bench_build.py", "--out", str(tmp_path), "--shapes", "tiny",
                           "--worlds", "1", "--data", str(corpus), "--label", "tiny"], cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads((tmp_path / "tiny.json").read_text())
    (row,), (hf,) = result["rows"], result["hf"]
    assert hf["rc"] == 0 and hf["peak"]["job_anon_gib"] > 0
    assert row["killed"] is None and 0 < row["ready_s"] < row["first_step_s"]
    assert row["to_first_step"]["ranks"]["0"]["anon_gib"] > 0
    assert row["handover_s"] > 0 and "ranks" in row["handover"]  # a tiny hand-over may fall between two samples
    assert row["resume"]["to_resumed_s"] > 0 and row["export"]["rc"] == 0
    assert "model.safetensors" in row["export"]["files"]
    assert "| tiny | 1 |" in proc.stdout
    again = subprocess.run([sys.executable, "benchmarks/build_report.py", str(tmp_path / "tiny.json")], cwd=REPO,
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and again.stdout.strip() in proc.stdout, again.stderr[-2000:]


def test_a_lora_row_is_one_phase_of_the_lora_method(tmp_path, corpus, monkeypatch):
    """``--method lora`` (BENCHMARKS.md, "LoRA at the 1B shape"): the row's config is the trainer's own, checked as
    ``xpt-ds train`` checks it, with LoRA's one phase."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from bench_build import phases_for, run_config

    from xpt_ds.config.manager import load_config
    assert [phases_for("lora", s, 2) for s in ("1b", "3b")] == [1, 1]
    assert [phases_for("xpt", "1b"), phases_for("xpt", "3b"), phases_for("xpt", "3b", 2)] == [2, 1, 2]
    for method in ("lora", "xpt"):
        n = phases_for(method, "1b")
        cfg = load_config(str(run_config(tmp_path / f"{method}.yaml", tmp_path / "run", tmp_path / "source", corpus,
                                         "1b", 1, n, method)))
        assert cfg.model.method == method and len(cfg.phases) == n


def test_an_extend_row_reads_the_extended_tokenizer_and_trains_the_new_rows(tmp_path, corpus, monkeypatch):
    """``--method extend`` (BENCHMARKS.md, "Vocabulary extension ... at the 1B shape"): the row's config names the
    extended tokenizer, starts the new rows from subword_mean and trains them (with the upper layers) in phase 2;
    the tiny shape (not Llama 3's vocabulary) or a given corpus is refused in one line."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from bench_build import phases_for, run_config

    from xpt_ds.config.manager import load_config
    cfg = load_config(str(run_config(tmp_path / "extend.yaml", tmp_path / "run", tmp_path / "source", corpus, "1b", 1,
                                     phases_for("extend", "1b"), "extend", tmp_path / "tok_ext")))
    assert (cfg.model.method, cfg.model.tokenizer, cfg.model.embedding_init) == ("extend", str(tmp_path / "tok_ext"),
                                                                                 "subword_mean")
    assert [p.trainable for p in cfg.phases] == [[], ["@new_rows", "@upper"]]  # phase 1: the method's preset
    for args in (["--shapes", "tiny"], ["--shapes", "1b", "--data", str(corpus)]):
        proc = subprocess.run([sys.executable, "benchmarks/bench_build.py", "--out", str(tmp_path / "o"), "--method",
                               "extend", *args], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and "--method extend makes its own tokenizer and data" in proc.stderr, args


PUBLISHED = {"gemma3-1b": 999_885_952, "gemma2-2b": 2_614_341_888, "qwen2.5-1.5b": 1_543_714_304}
SMALL = dict(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
             num_key_value_heads=1, head_dim=32, max_position_embeddings=256)


def test_the_family_shapes_have_their_published_sizes_and_start_their_norms_as_the_family_scales(tmp_path,
                                                                                                  monkeypatch):
    """``FAMILIES`` (BENCHMARKS.md, "Gemma 3 and Qwen2.5 at their real shapes"): each config builds, on the meta
    device, a model of the published parameter count; ``write_random`` writes each family's source in the layout
    ``from_pretrained`` loads, with every norm at 0 where the family scales by 1 + weight (Gemma) and at 1 elsewhere,
    and the other weights drawn, not left empty."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from bench_build import FAMILIES, write_random
    assert set(FAMILIES) == set(PUBLISHED)
    for shape, (model_type, settings) in FAMILIES.items():
        with torch.device("meta"):
            skeleton = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **settings))
        assert sum(p.numel() for p in skeleton.parameters()) == PUBLISHED[shape], shape
        small = AutoConfig.for_model(model_type, **{**settings, **SMALL}, dtype="bfloat16")
        out = write_random(tmp_path / shape, small)
        model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
        params = {n: p.detach() for n, p in model.named_parameters()}
        norms = [n for n in params if n.endswith("norm.weight")]
        assert len(norms) >= 2 * 2 + 1, (shape, norms)
        start = 0.0 if shape.startswith("gemma") else 1.0
        assert all(bool((params[n] == start).all()) for n in norms), shape
        drawn = params["model.embed_tokens.weight"]
        assert 0.015 < float(drawn.std()) < 0.025, shape
        if shape == "qwen2.5-1.5b":
            assert float(params["model.layers.0.self_attn.q_proj.bias"].abs().sum()) > 0
