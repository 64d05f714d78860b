"""Engine JSONs as a resume compares them (``xpt_ds.config.engine_json``): the stage and precision, whatever
DeepSpeed's sections are called, and the other settings by which a run's JSON and a checkpoint's recorded one
differ."""
import json

from conftest import REPO

DS_CONFIGS = sorted((REPO / "ds_configs").glob("*.json"))


def test_an_engine_jsons_precision_and_stage_whatever_its_sections_are_called():
    """A resume compares the checkpoint's recorded engine config with the run's by these (a change of precision
    goes through a universal copy): DeepSpeed's legacy section name ``bfloat16`` is bf16 too, so the same engine
    under either name is no change."""
    from xpt_ds.config.engine_json import precision, zero_stage
    shipped = {p.stem: json.loads(p.read_text()) for p in DS_CONFIGS}
    assert {name: (zero_stage(ds), precision(ds)) for name, ds in shipped.items()} == {
        name: (int(name[4]), name.split("_")[1]) for name in shipped}
    assert precision({"bfloat16": {"enabled": True}}) == precision(shipped["zero2_bf16"]) == "bf16"
    assert precision({"bf16": {"enabled": False}, "fp16": {"enabled": True}}) == "fp16"
    assert (zero_stage({}), precision({})) == (0, "fp32")


def test_a_resume_names_the_engine_settings_that_changed_and_only_those():
    """``engine_changes``: a checkpoint's recorded engine config (the JSON with the keys the trainer wrote into it,
    ``build_ds_config``) against the run's JSON as written. A shipped JSON against itself, at any batch, clipping
    or optimizer, is no change; neither is the stage, the precision or the legacy ``bfloat16`` name (the universal
    checkpoint's line says those); nested settings are named by their path, a missing one as unset."""
    from xpt_ds.config import TrainConfig
    from xpt_ds.config.engine_json import engine_changes
    from xpt_ds.training.engine import build_ds_config, load_ds_config

    for path in DS_CONFIGS:
        cfg = TrainConfig(deepspeed=str(path))
        cfg.optim.torch_adam, cfg.optim.grad_clip, cfg.optim.micro_batch_size = True, 0.5, 3
        assert engine_changes(build_ds_config(cfg, world_size=8), load_ds_config(str(path))) == [], path.name
    bf16 = json.loads((REPO / "ds_configs/zero2_bf16.json").read_text())
    saved = {**bf16, "train_batch_size": 64, "gradient_clipping": 1.0}
    legacy = {"zero_optimization": {**bf16["zero_optimization"], "stage": 3}, "bfloat16": {"enabled": True}}
    assert engine_changes(saved, legacy) == []
    offload = json.loads((REPO / "ds_configs/zero2_bf16_offload.json").read_text())
    assert engine_changes(saved, {**offload, "zero_optimization": {**offload["zero_optimization"],
                                                                   "overlap_comm": False}}) == [
        "zero_optimization.allgather_bucket_size 50000000 -> (unset)",
        "zero_optimization.offload_optimizer.device (unset) -> 'cpu'",
        "zero_optimization.offload_optimizer.pin_memory (unset) -> True",
        "zero_optimization.overlap_comm True -> False", "zero_optimization.reduce_scatter True -> (unset)"]
    assert engine_changes({"zero_optimization": {"stage": 1, "reduce_bucket_size": None}}, {}) == [
        "zero_optimization.reduce_bucket_size None -> (unset)"]


def test_the_trainers_load_universal_flag_is_no_engine_change():
    """A resume at another scale gives its engine ``checkpoint.load_universal`` (``build_engine``), and every
    checkpoint of that phase records it: the next plain resume with the same JSON warned of other DeepSpeed engine
    settings (``checkpoint.load_universal True -> (unset)``). The JSON's own checkpoint settings still count."""
    from xpt_ds.config import TrainConfig
    from xpt_ds.config.engine_json import engine_changes
    from xpt_ds.training.engine import build_ds_config, load_ds_config

    for path in DS_CONFIGS:
        saved = build_ds_config(TrainConfig(deepspeed=str(path)), world_size=2, load_universal=True)
        assert saved["checkpoint"] == {"load_universal": True}
        assert engine_changes(saved, load_ds_config(str(path))) == [], path.name
    saved["checkpoint"]["tag_validation"] = "Fail"
    assert engine_changes(saved, load_ds_config(str(path))) == ["checkpoint.tag_validation 'Fail' -> (unset)"]
