"""A source checkpoint whose tensors do not fit its own config.json, or hold NaN or inf, is one error line naming
the file and the key (``xpt_ds.model.values.source_files``): shapes are read from the files' headers before any engine
is built (a too-short position matrix was clipped and its missing rows trained from random; other shapes failed the
fill with a traceback); values are checked as each is read (a NaN weight stopped the first step with a false
"bad step" report)."""
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import base_config, run_main, write_config
from xpt_ds.config import ConfigError, ModelConfig
from xpt_ds.data.tokenizer import build_tokenizer
from xpt_ds.model.build import build_model

POSITIONS = "roberta.embeddings.position_embeddings.weight"
DENSE = "roberta.encoder.layer.1.output.dense.weight"


def _changed(tiny_roberta, out, key: str, value: torch.Tensor, bin_file: bool = False):
    """A copy of the tiny RoBERTa whose ``key`` in its weights file is ``value`` (as pytorch_model.bin: plain
    data, read memory-mapped)."""
    shutil.copytree(tiny_roberta, out)
    state = load_file(str(out / "model.safetensors"))
    state[key] = value
    if bin_file:
        (out / "model.safetensors").unlink()
        torch.save(state, out / "pytorch_model.bin")
    else:
        save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def _build(source, corpus):
    tok = build_tokenizer(str(corpus / "spm.model"))
    return build_model(ModelConfig(source=str(source), tokenizer=str(corpus / "spm.model"), method="xpt"), tok)


@pytest.mark.parametrize("bin_file", [False, True])
@pytest.mark.parametrize("key, rows", [(POSITIONS, 20), ("roberta.encoder.layer.0.attention.self.query.bias", 16)])
def test_a_tensor_of_another_shape_than_the_config_gives_is_one_line(tmp_path, tiny_roberta, corpus, key, rows,
                                                                      bin_file):
    held = load_file(str(tiny_roberta / "model.safetensors"))[key]
    bad = _changed(tiny_roberta, tmp_path / "bad", key, held[:rows].clone(), bin_file)
    with pytest.raises(ConfigError) as e:
        _build(bad, corpus)
    name = "pytorch_model.bin" if bin_file else "model.safetensors"
    assert str(e.value) == (f"config key 'model.source': {bad}: {name} holds {key} of shape "
                            f"{[rows, *held.shape[1:]]}, but its config.json gives it the shape {list(held.shape)}")


def test_a_nan_or_inf_in_a_source_weight_is_one_line_before_any_step(tmp_path, tiny_roberta, corpus):
    value = load_file(str(tiny_roberta / "model.safetensors"))[DENSE].clone()
    value[3, 5], value[0, 0] = float("nan"), float("-inf")
    bad = _changed(tiny_roberta, tmp_path / "bad", DENSE, value)
    with pytest.raises(ConfigError) as e:
        _build(bad, corpus)
    assert str(e.value) == (f"config key 'model.source': {bad}: model.safetensors holds {DENSE} with 2 non-finite "
                            f"value(s) (NaN or inf) of {value.numel()}: the source checkpoint is damaged")
    cfg = write_config(tmp_path / "cfg.yaml", base_config(tmp_path / "run", bad, corpus))
    proc = run_main("xpt_ds.cli.train", ["--config", str(cfg)])
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert proc.returncode == 2 and errors == [f"error: {e.value}"], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "step 1" not in proc.stderr
