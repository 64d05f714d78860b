"""What a checkpoint tag must pass before anything in it is loaded: every file its ``COMPLETE`` marker calls for
is there, every ``.pt`` file is plain data (``xpt_ds.io.trust``), and, on a resume, the config builds the model the
tag holds. Each failure is one line naming the file or the config keys."""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import deepspeed
from safetensors import SafetensorError, safe_open

from xpt_ds.checkpoint import migrate
from xpt_ds.checkpoint.store import agree
from xpt_ds.checkpoint.tags import MARKER, CheckpointError, read_marker
from xpt_ds.checkpoint.values import ValueFile
from xpt_ds.config import ConfigError
from xpt_ds.config.engine_json import engine_changes
from xpt_ds.config.schedule import lr_at
from xpt_ds.errors import first_line
from xpt_ds.io.trust import UntrustedError, check_plain
from xpt_ds.model.build import build_plan
from xpt_ds.model.decoder import is_decoder
from xpt_ds.model.skeleton import skeleton


# What decides a model's parameters, in the configs of the encoder and decoder families and xpt-ds's own keys.
SHAPE_KEYS = ("model_type", "xpt_method", "vocab_size", "hidden_size", "n_embd", "num_hidden_layers", "n_layer",
              "num_attention_heads", "n_head", "num_key_value_heads", "head_dim", "intermediate_size", "n_inner",
              "max_position_embeddings", "n_positions", "type_vocab_size", "tie_word_embeddings", "xpt_adapters",
              "xpt_adapter_size", "xpt_lora", "xpt_trelm", "xpt_trelm_source_vocab_size")


def check_same_model(tag_dir: Path, hf_config) -> None:
    """The model this config builds has the shape of the one checkpoint ``tag_dir`` holds: a run directory
    resumed with another ``model.source``, ``model.method`` or tokenizer is one line naming what differs, not
    DeepSpeed's load failing with every missing and unexpected key."""
    path = tag_dir / "hf_config" / "config.json"
    if not path.is_file():
        return
    try:  # a file cut short or emptied (a copy interrupted): as export.checkpoint_config says it
        saved = json.loads(path.read_text())
        if not isinstance(saved, dict):
            raise ValueError(f"not a JSON object: {saved!r:.60}")
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"checkpoint {tag_dir}: cannot read {path} ({first_line(e)})") from None
    now = hf_config.to_dict()
    diff = [f"{k} {saved[k]!r} -> {now[k]!r}" for k in SHAPE_KEYS if k in saved and k in now and saved[k] != now[k]]
    if diff:
        raise ConfigError(f"checkpoint {tag_dir} holds another model than this config builds ({'; '.join(diff)}): "
                          "resume with the run's model.source, model.method and model.tokenizer, or use a new "
                          "run_dir (or --resume none)")


def resumed_tags(tag_dir: Path, client: dict, model_cfg, tok, hf_config) -> dict[str, set[str]]:
    """The parameter tags of the model a resume from ``tag_dir`` builds: the checkpoint's record (which weights
    came from the source depended on its files, which a resume does not read); for a checkpoint from before tags
    were recorded (2026-11-27), the source's files decide again. A config that builds another model than the
    checkpoint holds is one error line naming what differs."""
    check_same_model(tag_dir, hf_config)
    saved = client.get("tags")
    if saved is None:
        plan = build_plan(model_cfg, tok, rows=False)
        plan.close()
        return plan.tags
    names = {n for n, _ in skeleton(hf_config).named_parameters()}
    if names != set(saved):
        odd = sorted(names ^ set(saved))
        raise ConfigError(f"checkpoint {tag_dir} holds other parameters than this config builds ({len(odd)} differ, "
                          f"first: {odd[0]}): resume with the run's model settings, or use a new run_dir (or "
                          "--resume none)")
    return {n: set(t) for n, t in saved.items()}


def check_resumed_phase(tag_dir: Path, client: dict, cfg, frozen_in: Callable[[int], set[str]]) -> None:
    """The phase a resume from ``tag_dir`` goes on in (the client state's ``phase_index``) is in ``cfg.phases``,
    and trains what the checkpoint's phase trained (``frozen_in(index)``: the engine's names of the parameters this
    config freezes in phases[index]): the optimizer state it holds is that set's, and DeepSpeed's loaders stop with a
    traceback at another one (a layout or size mismatch, a missing tensor). The checkpoint's frozen-weights file
    names the set it froze."""
    state = client["trainer"]
    index, step = state["phase_index"], state["phase_step"]
    if index >= len(cfg.phases):
        saved = client.get("config", {}).get("phases") or []
        name = saved[index].get("name", "?") if index < len(saved) else "?"
        raise ConfigError(f"config key 'phases' lists {len(cfg.phases)} phase(s), and checkpoint {tag_dir.name} is in "
                          f"phase '{name}' (phases[{index}]) at its step {step}: a resume goes on where its "
                          "checkpoint is; list the phases up to it as the run had them, or start over (--resume "
                          "none, or a new run_dir)")
    phase, frozen = cfg.phases[index], frozen_in(index)
    saved = set(ValueFile(migrate.frozen_file(tag_dir), cfg.checkpoint.allow_pickle).keys)
    if saved == frozen:
        return
    trains, freezes = sorted(saved - frozen), sorted(frozen - saved)
    first = (trains or freezes)[0].removeprefix("hf.")
    raise ConfigError(f"config key 'phases[{index}].trainable' ({phase.trainable or 'the method default'}) trains "
                      f"{len(trains)} parameter(s) that phase '{phase.name}' of checkpoint {tag_dir.name} froze and "
                      f"freezes {len(freezes)} it trained (first: {first}): a phase's trainable set cannot change "
                      "within it, as its optimizer state is the set's it trained; restore the key, or set "
                      f"phases[{index}].steps={step} to end the phase at the checkpoint and train the new set in a "
                      "phase after it")


# The data.* keys that decide which tokens the training stream holds, in which order, and how they are masked.
# data.seq_len is not here: a resume at another length is converted (xpt_ds.data.mlm.MLMBatchStream).
STREAM_KEYS = ("train_shards", "train_tokens", "seed", "shuffle_docs", "doc_separator", "masking", "mask_prob",
               "mask_replace_prob", "random_replace_prob", "span_p", "span_max", "mix", "parallel_shards",
               "source_shards", "parallel_micro_batch")


def data_changes(saved: dict, now) -> list[str]:
    """'data.KEY OLD -> NEW' for each stream key the checkpoint's config (``saved``: its ``data`` section) and
    this run's ``DataConfig`` set differently; a key the checkpoint's config lacks is not compared, except
    data.mix, which configs before it lacked (none)."""
    saved = {"mix": [], **saved}
    plain = {k: [dataclasses.asdict(m) for m in now.mix] if k == "mix" else getattr(now, k) for k in STREAM_KEYS}
    return [f"data.{k} {saved[k]!r} -> {plain[k]!r}" for k in STREAM_KEYS if k in saved and saved[k] != plain[k]]


def missing_files(tag_dir: Path) -> list[str]:
    """The files a complete tag holds by its marker's world size and ZeRO stage that are not there (a copy or a
    sync that left some behind): every rank's ``rank_state``, the model states (one file, or one per rank at
    ZeRO-3), the frozen weights (``frozen_fp32.safetensors``, or an older checkpoint's ``.pt``: every save
    since the marker recorded these wrote one) and, at ZeRO 1-3, every rank's optimizer states."""
    record = read_marker(tag_dir)
    world, stage = record.get("world_size"), record.get("zero_stage")
    if world is None or stage is None:  # a marker from before these were recorded
        return []
    want = [f"rank_state_{r:05d}.pt" for r in range(world)]
    want += ([f"zero_pp_rank_{r}_mp_rank_00_model_states.pt" for r in range(world)] if stage == 3
             else ["mp_rank_00_model_states.pt"])
    missing = [name for name in want if not (tag_dir / name).is_file()]
    if not any((tag_dir / f"{migrate.FROZEN}.{ext}").is_file() for ext in ("safetensors", "pt")):
        missing.append(f"{migrate.FROZEN}.safetensors")  # every save writes one, empty when nothing is frozen
    if stage >= 1:  # bf16 runs name them bf16_zero_pp_rank_*
        missing += [f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt" for r in range(world)
                    if not any(tag_dir.glob(f"*zero_pp_rank_{r}_mp_rank_00_optim_states.pt"))]
    return missing


def check_files(tag_dir: Path, allow_pickle: bool, distributed: bool = True) -> None:
    """Every file the tag's marker calls for is there (``missing_files``), every ``.pt`` file under ``tag_dir``
    that a resume may load is plain data (``xpt_ds.io.trust.check_plain``), before DeepSpeed unpickles any of
    them, and every ``.safetensors`` file's header covers the file (not cut short; the header only is read). A
    file of the universal copy that cannot be read says the copy can be deleted and made again.
    ``distributed``: the files are split over the ranks and one all-reduce makes every rank stop if any file
    is missing, refused or unreadable."""
    # universal.tmp/: what a conversion that was stopped or killed wrote, half-written files too; never loaded, and
    # removed by the next conversion (xpt_ds.checkpoint.universal)
    files = sorted(p for p in tag_dir.rglob("*") if p.suffix in (".pt", ".safetensors")
                   and p.relative_to(tag_dir).parts[0] != "universal.tmp")
    rank, world = (deepspeed.comm.get_rank(), deepspeed.comm.get_world_size()) if distributed else (0, 1)
    error, reading = None, tag_dir
    try:
        missing = missing_files(tag_dir)
        if missing:
            raise CheckpointError(f"checkpoint {tag_dir} is incomplete although it has its {MARKER} marker: "
                                  f"{', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''} missing "
                                  f"({len(missing)} file(s); copied without every rank's files?)")
        for path in files[rank::world]:
            reading = path
            if path.suffix == ".safetensors":
                safe_open(str(path), framework="pt")  # opening it reads its header, checked against the file's size
            else:
                check_plain([path], allow_pickle=allow_pickle)
    except CheckpointError as e:
        error = e
    except UntrustedError as e:
        error = e
    except (OSError, RuntimeError, EOFError, ValueError, SafetensorError) as e:  # truncated, or not a torch file
        why = first_line(e)
        where = "" if reading == tag_dir else f"{reading.relative_to(tag_dir)}: "
        derived = reading != tag_dir and reading.relative_to(tag_dir).parts[0] == "universal"
        hint = (f" ({tag_dir / 'universal'} is the copy xpt-ds made of it to resume at another scale: delete it, "
                "and the next resume makes it again)") if derived else ""
        error = CheckpointError(f"cannot read checkpoint {tag_dir}: {where}{why}{hint}")
    if distributed and agree(None if error is None else str(error)) and error is None:
        error = CheckpointError(f"another rank refused a file of checkpoint {tag_dir} (see its error)")
    if error is not None:
        raise error


def resume_warnings(tag_dir: Path, client: dict, cfg, hf_config, has_validation: bool, world: int, ds: dict,
                    position: tuple[int, int] = (0, 0)) -> list[str]:
    """What a resume from ``tag_dir`` on ``world`` ranks under engine JSON ``ds`` does otherwise than the run it
    continues, each a line for the log: another global batch (``batch_change``), other dropout masks
    (``dropout_change``), other optimizer settings or schedules (``optim_change``, at ``position``: the phase index
    and the schedule's step it resumes at), other engine settings (``engine_changes``), other data settings
    (``data_changes``), a validation set scored otherwise (``validation_change``)."""
    lines = [line for line in [batch_change(tag_dir, client, cfg.optim, world),
                               micro_batch_change(tag_dir, client, cfg.optim, is_decoder(hf_config)),
                               dropout_change(tag_dir, client, hf_config, world),
                               optim_change(tag_dir, client, cfg, *position)] if line]
    engine = engine_changes(client.get("ds_config") or {}, ds)
    if engine:
        lines.append(f"resuming {tag_dir.name} under other DeepSpeed engine settings than it was trained with "
                     f"(config key 'deepspeed', {cfg.deepspeed}: {'; '.join(engine)}): they apply from this step on")
    changed = data_changes(client.get("config", {}).get("data", {}), cfg.data)
    if changed:
        lines.append(f"resuming {tag_dir.name} with other data settings than it was trained with "
                     f"({'; '.join(changed)}): training goes on at the same position of the stream these settings "
                     "make")
    moved = validation_change(tag_dir, client, cfg.logging, has_validation)
    return lines + ([moved] if moved else []) + model_changes(tag_dir, client, cfg) + valid_set_change(
        tag_dir, client, cfg, has_validation)


# model.* keys that decide only a fresh start's weights, which a resume reads from its checkpoint instead
START_KEYS = ("init_seed", "embedding_init", "embedding_init_args", "head_bias_init", "itl_init")
# model.* keys a resume applies from its step on
LIVE_MODEL_KEYS = ("dropout", "mask_token")


def _changed(saved: dict, now, keys: tuple[str, ...], section: str) -> list[str]:
    return [f"{section}.{k} {saved[k]!r} -> {getattr(now, k)!r}" for k in keys if k in saved
            and saved[k] != getattr(now, k)]


def model_changes(tag_dir: Path, client: dict, cfg) -> list[str]:
    """Lines for model.* keys set otherwise than in the checkpoint's config: those that only build a fresh start
    (``START_KEYS``: the run goes on with the weights they made; ``keep_start_settings`` puts the checkpoint's back
    into the config, so config.yaml, later checkpoints and an export's model card say what built the weights), and
    those a resume applies from its step on (``LIVE_MODEL_KEYS``). Until 2026-12-05 both went unsaid."""
    saved = client.get("config", {}).get("model", {})
    start, live = _changed(saved, cfg.model, START_KEYS, "model"), _changed(saved, cfg.model, LIVE_MODEL_KEYS, "model")
    lines = []
    if start:
        lines.append(f"resuming {tag_dir.name} with other start settings than built its weights ({'; '.join(start)}): "
                     "they decide only a fresh start's weights, and a resume reads the weights from the checkpoint; "
                     "the run keeps the checkpoint's settings (config.yaml records those)")
    if live:
        lines.append(f"resuming {tag_dir.name} with other model settings than it was trained with "
                     f"({'; '.join(live)}): they apply from this step on")
    return lines


def keep_start_settings(client: dict, cfg) -> None:
    """The checkpoint's ``START_KEYS`` into ``cfg.model`` (every rank): they built the weights the run goes on
    with, whatever the resumed config says."""
    saved = client.get("config", {}).get("model", {})
    for k in START_KEYS:
        if k in saved:
            setattr(cfg.model, k, saved[k])


def valid_set_change(tag_dir: Path, client: dict, cfg, has_validation: bool) -> list[str]:
    """A line when the validation passes will score another set than the checkpoint's did (data.valid_shards,
    logging.eval_batches, data.seq_len): valid/*, best.json and early stopping then compare losses of two sets."""
    if not has_validation:
        return []
    saved = client.get("config", {})
    changed = (_changed(saved.get("data", {}), cfg.data, ("valid_shards", "seq_len"), "data")
               + _changed(saved.get("logging", {}), cfg.logging, ("eval_batches",), "logging"))
    if not changed:
        return []
    return [f"resuming {tag_dir.name} with another validation set than it was scored on ({'; '.join(changed)}): "
            "valid/* from this step on are not comparable with its earlier passes, yet best.json and early stopping "
            "compare them with those"]


def batch_change(tag_dir: Path, client: dict, optim, world: int) -> str | None:
    """A warning when the global batch (micro batch x grad_accum x ranks) differs from the checkpoint's: a resume
    on fewer GPUs halves it unless grad_accum grows, and the learning rate schedule is not rescaled for it."""
    saved = client.get("config", {}).get("optim", {})
    saved_world = migrate.saved_world_size(read_marker(tag_dir), client)
    if not saved_world:
        return None
    before = saved.get("micro_batch_size", optim.micro_batch_size) * saved.get("grad_accum", optim.grad_accum)
    before *= saved_world
    now = optim.micro_batch_size * optim.grad_accum * world
    if before == now:
        return None
    keep = before // (optim.micro_batch_size * world)
    hint = (f"; optim.grad_accum={keep} keeps {before}" if keep * optim.micro_batch_size * world == before
            else "")
    return (f"resuming {tag_dir.name} at a global batch of {now} sequences per step (optim.micro_batch_size "
            f"{optim.micro_batch_size} x optim.grad_accum {optim.grad_accum} x {world} rank(s)), where it trained "
            f"with {before} ({saved_world} rank(s)): the learning rate schedule is not rescaled for it{hint}")


def micro_batch_change(tag_dir: Path, client: dict, optim, causal: bool) -> str | None:
    """A warning when an MLM run resumes at another micro-batch size: its step averages the micro-batches' mean
    losses, each over the positions it masked (a count that varies), so the same global batch in other micro-batches
    weighs the positions otherwise. A decoder's micro-batches each predict as many positions: nothing changes."""
    saved = client.get("config", {}).get("optim", {}).get("micro_batch_size")
    if causal or saved is None or saved == optim.micro_batch_size:
        return None
    return (f"resuming {tag_dir.name} at optim.micro_batch_size {optim.micro_batch_size}, where it trained at {saved}: "
            "a step averages its micro-batches' mean MLM losses, each over the positions it masked, so other "
            "micro-batches weigh them otherwise and the run leaves the trajectory it was on, even at the same global "
            "batch")


# The model config keys of the families' dropout (encoders; GPT-2; the Llama layout's attention dropout).
DROPOUT_KEYS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "resid_pdrop", "embd_pdrop", "attn_pdrop",
                "attention_dropout")


def dropout_change(tag_dir: Path, client: dict, hf_config, world: int) -> str | None:
    """A warning when a model that draws dropout resumes on another number of ranks than the checkpoint's: each
    rank draws from its own stream (``seed`` + rank, saved per rank), so the resumed steps' masks are not the
    ones the uninterrupted run would have drawn, and its losses are matched only closely (docs/cluster.md)."""
    saved_world = migrate.saved_world_size(read_marker(tag_dir), client)
    drawn = {"model.dropout": max(getattr(hf_config, k, 0) or 0 for k in DROPOUT_KEYS),
             "model.lora.dropout": (getattr(hf_config, "xpt_lora", None) or {}).get("dropout") or 0}  # model.lora
    keys = [key for key, p in drawn.items() if p > 0]
    if not saved_world or saved_world == world or not keys:
        return None
    return (f"resuming {tag_dir.name} on {world} rank(s), where it trained on {saved_world}: each rank draws "
            "dropout from a stream of its own, so from this step on the dropout masks differ from those the run "
            "would have drawn uninterrupted, and its losses follow the uninterrupted run's only closely "
            f"({' and '.join(f'{key}: 0' for key in keys)} draw{'s' if len(keys) == 1 else ''} none)")


# The optim.* keys a resume takes from its config, not from the checkpoint (xpt_ds.checkpoint.store.load), and
# the phases[*] keys of the learning rate schedule (xpt_ds.config.schedule.lr_at).
OPTIM_KEYS = ("weight_decay", "betas", "eps", "grad_clip", "torch_adam")
SCHEDULE_KEYS = ("steps", "lr", "warmup_steps", "decay", "min_lr_ratio")


def optim_changes(saved: dict, cfg, phase_index: int) -> list[str]:
    """'optim.KEY OLD -> NEW' for each optimizer setting, and 'phases[i].KEY OLD -> NEW' for each schedule setting
    of the phases still to train (``phase_index`` on, each under the same name), that the checkpoint's config
    (``saved``) sets otherwise than ``cfg``; a key the checkpoint's config lacks is not compared."""
    optim = saved.get("optim", {})
    changed = [f"optim.{k} {optim[k]!r} -> {getattr(cfg.optim, k)!r}" for k in OPTIM_KEYS
               if k in optim and optim[k] != getattr(cfg.optim, k)]
    for i, (old, new) in enumerate(zip(saved.get("phases", []), cfg.phases)):
        if i >= phase_index and old.get("name") == new.name:
            changed += [f"phases[{i}].{k} {old[k]!r} -> {getattr(new, k)!r}" for k in SCHEDULE_KEYS
                        if k in old and old[k] != getattr(new, k)]
    return changed


def optim_change(tag_dir: Path, client: dict, cfg, phase_index: int, updates: int) -> str | None:
    """A warning when the optimizer settings or the schedule of a phase still to train differ from the checkpoint's
    config (``optim_changes``): they apply from the resumed step on, to the Adam moments and step counts it saved;
    where the phase it resumes in (at its schedule's step ``updates``) has another schedule, the line gives the
    next step's learning rate by both."""
    saved = client.get("config", {})
    changed = optim_changes(saved, cfg, phase_index)
    if not changed:
        return None
    line = (f"resuming {tag_dir.name} with other optimizer settings or schedules than it was trained with "
            f"({'; '.join(changed)}): they apply from this step on, to the Adam moments and step counts it saved")
    phases = saved.get("phases", [])
    if phase_index < min(len(phases), len(cfg.phases)) and phases[phase_index].get("name") == cfg.phases[
            phase_index].name:
        now = cfg.phases[phase_index]
        old = dataclasses.replace(now, **{k: v for k, v in phases[phase_index].items() if k in SCHEDULE_KEYS})
        if lr_at(now, updates) != lr_at(old, updates):
            line += (f"; the next step's learning rate is {lr_at(now, updates):.3g} ({lr_at(old, updates):.3g} by "
                     "the schedule it was trained with)")
    return line


def validation_change(tag_dir: Path, client: dict, logging_cfg, has_validation: bool) -> str | None:
    """A warning when the checkpoint's validation passes scored another set than this run's will: before
    2026-11-28 (no ``log_window`` in its client state) ``logging.eval_batches`` counted micro-batches per rank,
    so a W-rank run scored W times as many; since, it counts global micro-batches."""
    if "log_window" in client or not has_validation or not logging_cfg.eval_batches:
        return None
    world = read_marker(tag_dir).get("world_size") or 1
    if world == 1:
        return None
    n = logging_cfg.eval_batches
    return (f"checkpoint {tag_dir.name} was validated on logging.eval_batches={n} micro-batches on each of its "
            f"{world} ranks ({world * n} in all); a validation pass now scores {n} micro-batches in all, whatever "
            f"the number of ranks, so valid/*, best.json and early stopping compare with its passes only roughly "
            f"(logging.eval_batches={world * n} scores the set it did)")
