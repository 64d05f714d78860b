"""The model card an export carries (``README.md`` in the Hugging Face format) and the scores ``xpt-ds evaluate
--card`` adds to it.

The YAML header is ``huggingface_hub.ModelCardData``'s: ``base_model`` (``model.source`` when it is a Hub id),
``library_name``, ``pipeline_tag``, ``tags`` (``xpt-ds`` and the method). It has no ``language`` and no
``datasets``: no config key or shard manifest names the target language, and a run reads local shards, not a Hub
dataset; a user adds them by hand. The body comes from the run's own records: the method and its phases (the
checkpoint's resolved config), where the checkpoint stands (its trainer state: step, tokens seen), where the word
embeddings started (its embedding-init report), the last validation up to the checkpoint (``RUN/metrics.jsonl``)
and the command that trains it again.

An evaluation's section sits between two HTML comments keyed by what it scored (shards, scorer, sequence length,
masking), so a second evaluation of the same kind replaces the first's section and the YAML is never touched.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from xpt_ds.checkpoint.migrate import saved_world_size
from xpt_ds.checkpoint.tags import read_marker
from xpt_ds.config import TrainConfig, read_checkpoint_config
from xpt_ds.config.engine_json import zero_stage
from xpt_ds.config.manager import config_yaml
from xpt_ds.config.methods import METHODS
from xpt_ds.config.phase_checks import phase_objectives
from xpt_ds.embedding_init.context import summary
from xpt_ds.errors import UserError, first_line
from xpt_ds.io.paths import write_error
from xpt_ds.model.phases import preset_patterns, select

CARD = "README.md"
TAG = "xpt-ds"  # every card's first tag: what ``evaluate --card`` takes as a card of an export
EVALUATIONS = "<!-- xpt-ds evaluate: sections go above this line -->"


class CardError(UserError, ValueError):
    """A --card that is not an xpt-ds model card, or one that would no longer parse."""


def hub_id(source: str, run_dir: Path | None = None) -> str | None:
    """``model.source`` as ``base_model`` takes it: a Hub id as it is, a snapshot in the Hugging Face cache
    (``.../models--ORG--NAME/snapshots/REV``) as ORG/NAME; None for any other local directory or a GGUF file. The
    Hub takes only ids of its models there, and a local directory's name may be another model's id. A relative
    path is a run's working directory's, which no record keeps: it is taken as a local path where it names one
    from here or from ``run_dir`` or any directory above it (a run is mostly launched from one of those)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id
    for part in Path(source).parts:
        if part.startswith("models--"):  # a Hub id never holds "--", so the cache's separator is unambiguous
            return part.removeprefix("models--").replace("--", "/")
    if source.startswith((".", "/", "~")) or source.endswith(".gguf"):
        return None
    bases = [Path()] + ([run_dir.resolve(), *run_dir.resolve().parents] if run_dir is not None else [])
    if any((base / source).exists() for base in bases):
        return None
    try:
        validate_repo_id(source)
    except HFValidationError:
        return None
    return source


def card_metadata(cfg: TrainConfig, decoder: bool, run_dir: Path | None = None) -> dict:
    """The YAML header, as ``ModelCardData`` writes it (fields left None are not written)."""
    from huggingface_hub import ModelCardData
    data = ModelCardData(base_model=hub_id(cfg.model.source, run_dir), library_name="transformers",
                         pipeline_tag="text-generation" if decoder else "fill-mask", tags=[TAG, cfg.model.method])
    return data.to_dict()


def build_card(run_dir: Path, tag_dir: Path, client: dict, decoder: bool, sizes: dict[str, int],
               name: str, dtype: str = "float32", notes: list[str] | tuple = ()) -> str:
    """The card of the export of checkpoint ``tag_dir`` of ``run_dir`` (``client``: its client state; ``sizes``:
    each trained parameter's element count, for the phases' trainable counts) into a directory called ``name``,
    its weights in ``dtype``; ``notes``: what the export changed of the trained model's form (LoRA merged, the
    Llama form of a Qwen2 target, ...), one bullet each."""
    from huggingface_hub import ModelCard, ModelCardData
    cfg = read_checkpoint_config(client["config"])
    meta = card_metadata(cfg, decoder, run_dir)
    intro = _intro(cfg, meta, tag_dir, name, dtype)
    if notes:  # "what: how", as the export prints them
        intro += "\n\n" + "\n".join(f"- `{what}`: {how}" if how else f"- {what}"
                                     for what, _, how in (note.partition(": ") for note in notes))
    body = "\n\n".join([intro, _training(cfg, client, tag_dir, sizes, decoder),
                        _embeddings(cfg, client, run_dir), _validation(cfg, run_dir, client["trainer"]["global_step"]),
                        f"## Evaluation\n\n`xpt-ds evaluate --model {name} --shards SPEC --card` adds its scores "
                        f"here.\n\n{EVALUATIONS}", _reproduce(cfg, run_dir, tag_dir, client, dtype)])
    text = f"---\n{ModelCardData(**meta).to_yaml()}\n---\n\n{body}\n"
    ModelCard(text)  # parses as a card
    return text


def _intro(cfg: TrainConfig, meta: dict, tag_dir: Path, name: str, dtype: str) -> str:
    method = METHODS[cfg.model.method]
    src = cfg.model.source
    where = "" if meta.get("base_model") == src else (
        f" (`{src}`: the Hub's `{meta['base_model']}`)" if meta.get("base_model") else
        " (a local path, not a Hub id, so the header has no `base_model`)")
    return (f"# {name}\n\n`{src}`{where} post-trained on a new language with "
            f"xpt-ds `model.method: {cfg.model.method}` ({method.display}), exported by "
            f"`xpt-ds export` from checkpoint `{tag_dir.name}` of run `{tag_dir.parent.parent.resolve()}`"
            + ("." if dtype == "float32" else f", its weights in {dtype} (each rounded once from the training's "
                                              "fp32 value)."))


def _ranks(n: int) -> str:
    return f"{n} rank" + ("" if n == 1 else "s")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")  # a regex alternation would end the table cell


def _trains(cfg: TrainConfig, i: int, tags: dict | None, sizes: dict[str, int]) -> str:
    """Phase ``i``'s trainable patterns and, where the checkpoint names each parameter's groups, how many
    parameters they select."""
    phase = cfg.phases[i]
    patterns = phase.trainable or preset_patterns(cfg, i)
    text = ", ".join(f"`{p}`" for p in patterns) + ("" if phase.trainable else " (the method's preset)")
    if tags and sizes:
        try:
            chosen = select(patterns, {n: set(t) for n, t in tags.items()}, f"phases[{i}].trainable")
        except UserError:  # the run checked its patterns; a card does not stop an export
            return text
        text += f": {sum(sizes.get(n, 0) for n in chosen):,} parameters"
    return text


def _start(cfg: TrainConfig, i: int) -> str:
    phase = cfg.phases[i]
    if phase.start_from:
        return f"`{phase.start_from}`'s end"
    if phase.merges:
        parts = [f"`{pat}` from `{src}`" for pat, src in phase.merge.take.items()]
        parts += [f"mean of {', '.join(f'`{p}`' for p in phase.merge.average)}"] if phase.merge.average else []
        return "merge: " + "; ".join(parts)
    return "the previous phase's end" if i else "the built model"


def _training(cfg: TrainConfig, client: dict, tag_dir: Path, sizes: dict[str, int], decoder: bool) -> str:
    method = METHODS[cfg.model.method]
    graph = any(p.start_from or p.merges for p in cfg.phases)
    head = ["phase", "steps", "peak lr", "warmup", "decay", "trains"] + (["objectives"] if method.trelm else []) \
        + (["starts from"] if graph else [])
    rows = []
    for i, ph in enumerate(cfg.phases):
        decay = ph.decay if ph.decay == "constant" else f"{ph.decay} to {ph.min_lr_ratio:g} of peak"
        row = [f"`{ph.name}`", f"{ph.steps:,}", f"{ph.lr:g}", f"{ph.warmup_steps:,}", decay,
               _trains(cfg, i, client.get("tags"), sizes)]
        row += [", ".join(phase_objectives(cfg, i))] if method.trelm else []
        row += [_start(cfg, i)] if graph else []
        rows.append("| " + " | ".join(_cell(c) for c in row) + " |")
    state, marker = client["trainer"], read_marker(tag_dir)
    world = _world(tag_dir, client)
    phase = cfg.phases[min(state["phase_index"], len(cfg.phases) - 1)]
    batch = cfg.optim.micro_batch_size * cfg.optim.grad_accum * world
    tokens = f"**Tokens seen**: {state['tokens_seen']:,}"
    if state["target_tokens_seen"] != state["tokens_seen"]:  # the client state migrated (export.py)
        tokens += f" ({state['target_tokens_seen']:,} of them in rows of `data.train_shards`)"
    return "\n".join([
        "## Training", "",
        "| " + " | ".join(head) + " |", "|" + "---|" * len(head), *rows, "",
        f"**Checkpoint**: `{tag_dir.name}`, global step {state['global_step']:,} of "
        f"{sum(p.steps for p in cfg.phases):,} planned (phase `{phase.name}`, its step {state['phase_step']:,} of "
        f"{phase.steps:,}); {_ranks(world)}, ZeRO stage {_stage(marker, client)}.", "",
        f"{tokens}, in batches of {batch:,} sequences (`optim.micro_batch_size` {cfg.optim.micro_batch_size} x "
        f"`optim.grad_accum` {cfg.optim.grad_accum} x {_ranks(world)}) of up to {cfg.data.seq_len} pieces.", "",
        f"**Objective**: {'next-token prediction' if decoder else 'masked-language modelling'}. "
        f"**Data**: `data.train_shards` {', '.join(f'`{s}`' for s in cfg.data.train_shards)}"
        + "".join(f", blended with `{m.name}` ({m.weight:.2%} of the rows"
                  + "".join(f", in phase `{ph.name}` {ph.mix[m.name]:.2%}" for ph in cfg.phases if m.name in ph.mix)
                  + f": {', '.join(f'`{s}`' for s in m.shards)})" for m in cfg.data.mix) + "; "
        f"tokenizer `{cfg.model.tokenizer or cfg.model.source}`"
        + ("." if decoder else f"; masking `{cfg.data.masking}`, `data.mask_prob` {cfg.data.mask_prob:g}.")])


def _embeddings(cfg: TrainConfig, client: dict, run_dir: Path) -> str:
    """The embedding-init report the checkpoint carries (else ``RUN/embedding_init.json``, which holds the same)."""
    report = client.get("embedding_init")
    if report is None:
        try:
            report = json.loads((run_dir / "embedding_init.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):  # none (a run from before the reports), or unreadable: the card says so
            report = None
    args = json.dumps(cfg.model.embedding_init_args, ensure_ascii=False) if cfg.model.embedding_init_args else ""
    vocab = METHODS[cfg.model.method].vocab
    start = (f"`model.embedding_init: {cfg.model.embedding_init}`" + (f" with `{args}`" if args else "") + "."
             if vocab != "source" else
             f"`model.method: {cfg.model.method}` keeps the source's vocabulary and its embedding rows.")
    if vocab == "extend":
        start = f"The source's rows are kept for its own pieces; the new pieces' rows start from {start}"
    lines = ["## Embedding start", "", start]
    if report is None:
        lines += ["", "The checkpoint records no embedding-init report (written before the reports were)."]
        return "\n".join(lines)
    lines += ["", f"Report (`embedding_init.json`): {summary(report)}."]
    if isinstance(report.get("output_rows"), dict):
        lines += ["", f"Output embeddings: {summary(report['output_rows'])}."]
    return "\n".join(lines)


def last_validation(run_dir: Path, step: int) -> tuple[int, dict] | None:
    """(step, its ``valid/*`` figures) of the last validation in ``RUN/metrics.jsonl`` at or before ``step``."""
    path, found = run_dir / "metrics.jsonl", None
    # a byte that is no UTF-8 (a damaged line) spoils that line alone: it is no JSON, skipped as a cut line is
    for line in (path.read_text(encoding="utf-8", errors="replace").splitlines() if path.is_file() else []):
        try:
            row = json.loads(line)
        except ValueError:  # a line being written
            continue
        if not isinstance(row, dict):
            continue
        figures = {k: v for k, v in row.items() if k.startswith("valid/")}
        if figures and row.get("step", step + 1) <= step:
            found = (row["step"], figures)
    return found


def _number(v) -> str:
    if isinstance(v, bool) or v is None:
        return "-" if v is None else str(v)
    return f"{v:,}" if isinstance(v, int) else f"{v:.6g}"


def _validation(cfg: TrainConfig, run_dir: Path, step: int) -> str:
    found = last_validation(run_dir, step)
    if found is None:
        return "## Validation\n\nThe run logged no validation up to this checkpoint (`RUN/metrics.jsonl`)."
    at, figures = found
    n = cfg.logging.eval_batches
    which = "every sequence" if n == 0 else f"the first {n} micro-batches of {cfg.optim.micro_batch_size} sequences"
    rows = [f"| {_cell(k.removeprefix('valid/'))} | {_number(v)} |" for k, v in figures.items()]
    mixed = [m.name for m in cfg.data.mix if m.valid_shards]
    also = (f" (rows `NAME/...`: on those of the `data.mix` corpus NAME, {', '.join(f'`{n}`' for n in mixed)})"
            if mixed else "")
    return "\n".join(["## Validation", "", f"At step {at:,} (`RUN/metrics.jsonl`), on {which} of "
                      f"`data.valid_shards` {', '.join(f'`{s}`' for s in cfg.data.valid_shards)}{also}:", "",
                      "| metric | value |", "|---|---|", *rows])


def _world(tag_dir: Path, client: dict) -> int:
    """The ranks the checkpoint was written on (an older marker lacks them: ``migrate.saved_world_size``)."""
    return saved_world_size(read_marker(tag_dir), client) or 1


def _stage(marker: dict, client: dict) -> int | str:
    """The ZeRO stage of the checkpoint: its marker's, else (an older marker) its DeepSpeed config's."""
    if marker.get("zero_stage") is not None:
        return marker["zero_stage"]
    return zero_stage(client["ds_config"]) if isinstance(client.get("ds_config"), dict) else "?"


def _reproduce(cfg: TrainConfig, run_dir: Path, tag_dir: Path, client: dict, dtype: str) -> str:
    world = _world(tag_dir, client)
    config = run_dir.resolve() / "config.yaml"
    train = f"--config {config} --run_dir=NEW_RUN_DIR"
    train = f"xpt-ds train {train}" if world == 1 else f"torchrun --nproc_per_node {world} -m xpt_ds.cli.train {train}"
    return "\n".join([
        "## Reproduce", "",
        f"On {_ranks(world)}, as the run (another world size changes the global batch unless `optim.grad_accum` "
        "makes up for it; `launch/` has the multi-node launchers):", "",
        "```bash", train, f"xpt-ds export --run NEW_RUN_DIR --tag {tag_dir.name} --out NEW_EXPORT_DIR"
        + ("" if dtype == "float32" else f" --dtype {dtype}"), "```", "",
        f"`{config}` is the run's resolved config; the checkpoint's own copy:", "",
        "<details><summary>config.yaml</summary>", "", "```yaml", config_yaml(cfg).rstrip("\n"), "```", "",
        "</details>"])


def card_file(path: Path) -> Path:
    """``--card PATH`` (the card, or an export directory holding one), checked before anything is evaluated: a
    model card that ``xpt-ds export`` wrote (its tags start with xpt-ds), in a directory evaluate can write to."""
    from huggingface_hub import ModelCard
    from xpt_ds.io.paths import unwritable
    card = path / CARD if path.is_dir() else path
    if not card.is_file():
        raise FileNotFoundError(f"--card {card}: no such file (xpt-ds export writes its model card as {CARD})")
    try:
        tags = ModelCard.load(card).data.tags or []
    except Exception as e:  # noqa: BLE001 - the hub client's parse errors have no common base worth naming
        raise CardError(f"--card {card}: not a model card ({first_line(e)})") from None
    if TAG not in tags:
        raise CardError(f"--card {card}: not a model card of an xpt-ds export (its tags have no '{TAG}')")
    why = unwritable(card.parent)
    if why is not None:
        raise OSError(f"--card {card}: cannot write there ({why})")
    return card


def evaluation_key(setting: dict) -> str:
    """What identifies an evaluation's section: a digest of what it scored (shards, scorer, length, masking)."""
    return hashlib.sha256(json.dumps(setting, sort_keys=True).encode()).hexdigest()[:12]


def evaluation_section(setting: dict, scores: dict, scorer: str) -> str:
    """The section's Markdown: what was scored on which shards, then every numeric figure."""
    masked = ("next tokens" if setting.get("objective") == "next_token" else
              f"masked tokens ({setting['masking']} masking, seed {setting['seed']})")
    part = (f", the first {setting['max_batches']} batches of {setting['batch_size']} sequences"
            if setting.get("max_batches") else "")
    rows = [f"| {_cell(k)} | {_number(v)} |" for k, v in scores.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)]
    lines = [f"### `xpt-ds evaluate` on {', '.join(f'`{s}`' for s in setting['shards'])}", "",
             f"{scorer} on the {masked} of sequences of {setting['seq_len']} pieces{part}:", "",
             "| metric | value |", "|---|---|", *rows]
    if scores.get("skipped_shards"):
        lines += ["", "Left out as corrupt: " + ", ".join(f"`{s}`" for s in scores["skipped_shards"]) + "."]
    return "\n".join(lines)


def add_evaluation(card: Path, setting: dict, scores: dict, scorer: str = "The model") -> bool:
    """Put an evaluation's section into ``card``: in place of the section of an earlier evaluation with the same
    ``setting`` (True), else before the end marker, or at the end of a card whose marker was edited away."""
    from huggingface_hub import ModelCard
    key = evaluation_key(setting)
    begin, end = f"<!-- xpt-ds evaluate {key} -->", f"<!-- /xpt-ds evaluate {key} -->"
    section = f"{begin}\n\n{evaluation_section(setting, scores, scorer)}\n\n{end}"  # blank lines: Markdown blocks
    text = card.read_text(encoding="utf-8")
    start = text.find(begin)
    stop = text.find(end, start) if start >= 0 else -1
    if stop >= 0:
        text = text[:start] + section + text[stop + len(end):]
    elif EVALUATIONS in text:
        at = text.index(EVALUATIONS)
        text = text[:at] + section + "\n\n" + text[at:]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    try:
        ModelCard(text)
    except Exception as e:  # noqa: BLE001 - see card_file
        raise CardError(f"--card {card}: would not parse as a model card after the edit ({first_line(e)})") \
            from None
    write_card(card, text)
    return stop >= 0


def write_card(path: Path, text: str) -> None:
    """Beside it, then renamed over it: a card is whole, the old or the new (UTF-8: pieces are target text)."""
    tmp = path.with_name(f".{path.name}.writing-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:  # a full disk: neither a half card nor its temporary file stays; the card is named
        tmp.unlink(missing_ok=True)
        raise write_error(OSError(e.errno, e.strerror), path) or e from None
