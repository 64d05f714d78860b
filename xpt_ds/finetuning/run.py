"""Fine-tuning a Hugging Face encoder or decoder once per seed (002 Table 3): read and check the files, load the
model in fp32 (its code only by ``xpt_ds.io.trust``'s consent), train with AdamW and linear warmup/decay, keep the
best-validation epoch, score the test set and write ``OUT/results.json``."""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import torch

from xpt_ds.data.tokenizer import check_vocabulary, model_tokenizer
from xpt_ds.evaluation.text_bpb import max_positions
from xpt_ds.finetuning.config import ADAM_BETAS, ADAM_EPS, OFFSET_POSITIONS, FinetuneConfig, validate
from xpt_ds.finetuning.data import Encoded, FinetuneError, collate, encode, pair_separator, template_separator
from xpt_ds.finetuning.metrics import (
    classification_metrics,
    entity_metrics,
    majority_baseline,
    train_majority,
    regression_metrics,
    relation_metrics,
    summarize,
)
from xpt_ds.finetuning.lora import check_lora, with_lora, without_lora
from xpt_ds.finetuning.out_dir import OutDir
from xpt_ds.finetuning.padding import pad_no_row_ends_in, pad_with
from xpt_ds.finetuning.precision import autocast, frozen_bases_in_bf16, uses_autocast
from xpt_ds.finetuning.relation import encode_relations, marker_tokens
from xpt_ds.finetuning.snapshot import BestWeights
from xpt_ds.finetuning.splits import read_splits
from xpt_ds.finetuning.relation_model import (
    RelationClassifier,
    add_marker_tokens,
    init_marker_rows,
    save_relation_model,
)
from xpt_ds.io.file_modes import as_umask
from xpt_ds.io.model_source import check_model_source
from xpt_ds.io.paths import write_error, unwritable
from xpt_ds.io.trust import UntrustedError, read_config_dict, reading_weights, remote_code_consent
from xpt_ds.model.weight_decay import decays

log = logging.getLogger("xpt_ds.cli.finetune")


@dataclass
class Split:
    encoded: Encoded
    gold: list  # class ids, scores, or per-word tag ids (all words, also those truncated away)


@dataclass
class Prepared:
    """Everything that is the same for every seed."""
    labels: list[str]
    splits: dict[str, Split]
    tokenizer: object
    remote_code: bool  # load with trust_remote_code (xpt_ds.io.trust.remote_code_consent said yes)
    max_length: int
    config_dict: dict  # the model's config.json
    pad_id: int  # what batches are padded with; a decoder's config is given the same (build_model)
    causal: bool  # a decoder (xpt_ds.model.decoder.is_causal_lm): its sequence head reads its last unpadded piece
    pair_sep: str = ""  # what a decoder's second sentence of a pair starts with (data.pair_separator)
    markers: dict[str, list[int]] = field(default_factory=dict)  # relation: marker -> pieces its row starts from
    dropped: dict[str, int] = field(default_factory=dict)  # relation: examples per split whose markers do not fit


def _config_dict(cfg: FinetuneConfig) -> dict:
    """The model's config.json as a dict, read as JSON without instantiating (and so without running) any code."""
    check_model_source(cfg.model, f"--model {cfg.model}", FinetuneError)  # before transformers asks the hub
    try:
        return read_config_dict(cfg.model)
    except (OSError, ValueError) as e:
        first = str(e).splitlines()[0]
        named = f"--model {cfg.model}: "  # read_config_dict's own errors name the model already
        raise FinetuneError(first if first.startswith(named) else f"{named}cannot load its config ({first})") from None


def _max_length(cfg: FinetuneConfig, config_dict: dict, tokenizer) -> int:
    """--max-length capped by the tokenizer's and the model's positions (``text_bpb.max_positions``: an export's
    ``xpt_max_length``, ``max_position_embeddings``, or GPT-2's ``n_positions``)."""
    limit = cfg.max_length
    if tokenizer.model_max_length < 1e6:  # "unset" is a huge sentinel in transformers
        limit = min(limit, tokenizer.model_max_length)
    positions = max_positions(SimpleNamespace(**config_dict))
    if positions is not None:
        pad = config_dict.get("pad_token_id")
        offset = (1 if pad is None else pad) + 1 if config_dict.get("model_type") in OFFSET_POSITIONS else 0
        limit = min(limit, positions - (0 if isinstance(config_dict.get("xpt_max_length"), int) else offset))
    return limit


def prepare(cfg: FinetuneConfig) -> Prepared:
    """Read and check every file before loading the model, so bad data fails in a second."""
    from xpt_ds.model.decoder import is_causal_lm
    examples, labels, targets = read_splits(cfg)
    config_dict = _config_dict(cfg)
    if cfg.lora_rank:
        check_lora(cfg.model, config_dict)
    try:  # code the model ships runs only if it is xpt-ds's own export code or the user said so
        remote = remote_code_consent(cfg.model, cfg.trust_remote_code)
    except UntrustedError as e:
        raise FinetuneError(str(e)) from None
    try:
        tokenizer = model_tokenizer(cfg.model, trust_remote_code=remote)  # a Qwen2 export: the one it wrote
        check_vocabulary(tokenizer, cfg.model)
    except (OSError, ValueError) as e:
        raise FinetuneError(f"--model {cfg.model}: cannot load its tokenizer ({str(e).splitlines()[0]})") from None
    if cfg.task == "token_classification":
        if not tokenizer.is_fast:
            raise FinetuneError(f"--model {cfg.model}: token_classification needs a fast tokenizer (its pieces' "
                                "character offsets)")
    max_length = _max_length(cfg, config_dict, tokenizer)
    # Token types only for a model that declares more than one (BERT, ALBERT, ELECTRA): GPT-2 and XLM would add
    # a token type's id as a word's embedding (GPT-2: wte[0] to every piece), as stock inference never does.
    token_types = config_dict.get("type_vocab_size", 0) > 1
    causal = is_causal_lm(config_dict)
    padding = dict(pad_id=pad_with(tokenizer, causal, cfg.model), causal=causal)
    if cfg.task == "relation":
        return _prepare_relations(examples, targets, labels, tokenizer, remote, max_length, token_types, config_dict,
                                  padding)
    pair_sep = pair_separator(tokenizer) if causal and cfg.text_pair_column else ""
    itself = bool(pair_sep) and template_separator(tokenizer, pair_sep)  # and so does the one --save-model saves
    if pair_sep:
        log.info("the tokenizer of %s puts nothing between a pair's sentences: each second sentence starts after "
                 "%r, as a new document does%s", cfg.model, pair_sep, "; its pair template now puts it there, in "
                 "the tokenizer a saved model keeps too" if itself else " (the saved tokenizer does not do this)")
    text_sep = "" if itself else pair_sep
    splits = {name: Split(encode(exs, targets[name], tokenizer, cfg.task, max_length, token_types, causal, text_sep),
                          targets[name]) for name, exs in examples.items()}
    if causal and cfg.task != "token_classification":  # the sequence head finds a row's last piece by the pad id
        rows = [f["input_ids"] for split in splits.values() for f in split.encoded.features]
        padding["pad_id"] = pad_no_row_ends_in(tokenizer, padding["pad_id"], rows, cfg.model)
    return Prepared(labels, splits, tokenizer, remote, max_length, config_dict, **padding, pair_sep=pair_sep)


def _prepare_relations(examples: dict, targets: dict, labels: list[str], tokenizer, remote: bool, max_length: int,
                       token_types: bool, config_dict: dict, padding: dict) -> Prepared:
    """Markers for every entity type of every split join the tokenizer, then each split is encoded; gold
    covers the examples kept (a dropped one is counted in ``Prepared.dropped``)."""
    pieces = add_marker_tokens(tokenizer, marker_tokens([ex for exs in examples.values() for ex in exs]))
    splits, dropped = {}, {}
    for name, exs in examples.items():
        enc = encode_relations(exs, targets[name], tokenizer, max_length, token_types, f"--{name}",
                               causal=padding["causal"])
        splits[name] = Split(Encoded(enc.features, []), [targets[name][i] for i in enc.kept])
        dropped[name] = enc.dropped
    return Prepared(labels, splits, tokenizer, remote, max_length, config_dict, **padding, markers=pieces,
                    dropped=dropped)


def _task_class(task: str):
    """relation: the bare encoder (``AutoModel``), under ``RelationClassifier``'s head."""
    from transformers import AutoModel, AutoModelForSequenceClassification, AutoModelForTokenClassification
    return {"token_classification": AutoModelForTokenClassification, "relation": AutoModel}.get(
        task, AutoModelForSequenceClassification)


def _check_remote_head(model_path: str, config_dict: dict, auto_cls) -> None:
    """An adapters export maps each task head to its own code (xpt_adapters.py). One written before the task
    heads were mapped would load the stock head without its adapters and fine-tune a different model."""
    if config_dict.get("xpt_adapter_size") and auto_cls.__name__ not in (config_dict.get("auto_map") or {}):
        raise FinetuneError(f"--model {model_path}: its config.auto_map has no {auto_cls.__name__}, so the "
                            "adapters would be dropped; export the run again with python -m xpt_ds.cli.export")


def build_model(cfg: FinetuneConfig, prep: Prepared):
    """The model in fp32 whatever its files hold (a hub decoder is bf16: AdamW's steps would round away in it;
    ``--precision`` says whether the step runs under bf16 autocast). A decoder's config names the id batches are
    padded with, which its sequence head skips to find each row's last piece."""
    auto_cls = _task_class(cfg.task)
    kw = {"dtype": torch.float32}
    if prep.causal and prep.config_dict.get("pad_token_id") != prep.pad_id:
        kw["pad_token_id"] = prep.pad_id
    if prep.remote_code:
        _check_remote_head(cfg.model, prep.config_dict, auto_cls)
    if cfg.task == "regression":
        kw.update(num_labels=1, problem_type="regression")
    elif cfg.task != "relation":
        kw.update(num_labels=len(prep.labels), id2label=dict(enumerate(prep.labels)),
                  label2id={n: i for i, n in enumerate(prep.labels)})
        if cfg.task == "classification":
            kw["problem_type"] = "single_label_classification"
    # prep.remote_code: remote_code_consent's answer, in prepare
    with reading_weights(f"--model {cfg.model}", FinetuneError):
        try:
            model = auto_cls.from_pretrained(cfg.model, trust_remote_code=prep.remote_code, **kw)
        except (OSError, ValueError) as e:
            raise FinetuneError(f"--model {cfg.model}: cannot load it as {auto_cls.__name__} "
                                f"({str(e).splitlines()[0]})") from None
    if cfg.lora_rank:  # the updates train with the task head
        with_lora(model, cfg.lora_rank, cfg.lora_alpha, prep.config_dict["model_type"])
    if cfg.activation_checkpointing:
        _recompute_layers(model, cfg.model)
    if cfg.task != "relation":
        return model
    init_marker_rows(model, prep.tokenizer, prep.markers)
    return RelationClassifier(model, len(prep.labels), prep.config_dict.get("hidden_dropout_prob", 0.1))


def _recompute_layers(model, name: str) -> None:
    """Activation checkpointing of every layer (``xpt_ds.model.forward.recompute``, as the trainer's): the
    recomputation restores the forward's RNG state, so dropout draws the same masks and the gradients are the
    same bits."""
    from xpt_ds.model.forward.recompute import checkpoint_layers
    try:
        recomputed, layers = checkpoint_layers(model, 1)
    except ValueError as e:  # a model class of its own code that does not support it
        raise FinetuneError(f"--activation-checkpointing: --model {name}: {str(e).splitlines()[0]}") from None
    if not recomputed:
        raise FinetuneError(f"--activation-checkpointing: --model {name} has no layer that can recompute its "
                            "activations (transformers' GradientCheckpointingLayer)")
    log.info("activation checkpointing: %d of %d layers recompute in the backward", recomputed, layers)


def save_finetuned(model, cfg: FinetuneConfig, prep: Prepared, out: Path) -> None:
    """The fine-tuned model and its tokenizer, for stock ``transformers`` (relation: ``relation_model``). The
    tokenizer pads on the right, as training's batches did (``collate``): a decoder export's pads on the left, for
    generation, and a model of learned absolute positions (GPT-2) reads a left-padded row at other positions, so
    stock batched inference would predict otherwise than each row alone."""
    prep.tokenizer.padding_side = "right"
    if cfg.task == "relation":
        save_relation_model(model, prep.tokenizer, prep.labels, list(prep.markers), out, cfg.no_relation_label,
                            prep.causal)
    else:
        # LoRA: merged on the host (the seed's last use of the model), so the device never holds fp32 sums of every
        # map
        try:
            (without_lora(model.cpu()) if cfg.lora_rank else model).save_pretrained(out)
            prep.tokenizer.save_pretrained(str(out))
        except Exception as e:  # safetensors' and the tokenizer's write errors are no OSError and name no file
            raise write_error(e, Path(cfg.out) / "model") or e
        as_umask(out)  # safetensors writes 0600 files: the group could not read the model
    keep_spm(Path(cfg.model), out)


def keep_spm(model_dir: Path, out: Path) -> None:
    """An export's ``spm.model`` goes with the saved model: where stock ``AutoTokenizer`` rebuilds the tokenizer
    (Qwen2's model type: ``xpt_ds.data.tokenizer.rebuilt_by_auto``), it is how ``model_tokenizer`` (a later
    finetune or evaluate) knows to read the tokenizer written there, and the export's warning says so."""
    import shutil

    from xpt_ds.export.hf import warn_auto_tokenizer
    if not (model_dir / "spm.model").is_file():
        return
    shutil.copyfile(model_dir / "spm.model", out / "spm.model")
    model_type = json.loads((out / "config.json").read_text(encoding="utf-8")).get("model_type", "?")
    warn_auto_tokenizer(out, f"{out}'s", out, model_type)


def build_optimizer(model, cfg: FinetuneConfig, total_steps: int):
    """AdamW without decay on biases and LayerNorm; linear warmup to ``lr``, then linear decay to 0."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (decay if decays(name, p.shape) else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=ADAM_BETAS, eps=ADAM_EPS)
    warmup = int(cfg.warmup_ratio * total_steps)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)


class Diverged(Exception):
    """A seed's training loss became NaN or infinite: its weights are no longer a model to score."""


def remedy(cfg: FinetuneConfig) -> str:
    """What a diverged seed's line suggests: the clip too, when it is off."""
    return "a lower --lr may help" if cfg.grad_clip > 0 else "a lower --lr or --grad-clip 1.0 may help"


def train_epoch(model, loader, opt, sched, cfg: FinetuneConfig, device: torch.device) -> float:
    model.train()
    total, bf16 = 0.0, uses_autocast(cfg.precision, device)
    for step, batch in enumerate(loader, 1):
        batch = {k: v.to(device) for k, v in batch.items()}
        with autocast(bf16, device):
            loss = model(**batch).loss
        value = loss.item()
        if not math.isfinite(value):
            raise Diverged(f"train loss {value} at step {step} of {len(loader)}")
        loss.backward()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        total += value
    return total / len(loader)


@torch.no_grad()
def predict(model, split: Split, task: str, pad_id: int, batch_size: int, device: torch.device,
            bf16: bool = False) -> list:
    """Class ids, scores, per-word tag ids (a word truncated away is predicted ``O``, id 0), or relation's
    class probabilities."""
    model.eval()
    feats = split.encoded.features
    out = []
    for i in range(0, len(feats), batch_size):
        batch = collate(feats[i:i + batch_size], pad_id)
        batch.pop("labels")
        with autocast(bf16, device):
            logits = model(**{k: v.to(device) for k, v in batch.items()}).logits.float().cpu()
        if task == "regression":
            out.extend(logits[:, 0].tolist())
        elif task == "classification":
            out.extend(logits.argmax(-1).tolist())
        elif task == "relation":  # AUPRC ranks by probability
            out.extend(torch.softmax(logits, -1).tolist())
        else:
            ids = logits.argmax(-1).tolist()
            for row, at in zip(ids, split.encoded.word_pos[i:i + batch_size]):
                out.append([row[p] if p >= 0 else 0 for p in at])
    return out


def score(task: str, gold: list, pred: list, labels: list[str], no_relation: str = "") -> dict[str, float]:
    if task == "relation":
        return relation_metrics(gold, pred, labels.index(no_relation) if no_relation in labels else None)
    if task == "classification":
        return classification_metrics(gold, pred, len(labels))
    if task == "regression":
        return regression_metrics(gold, pred)
    return entity_metrics([[labels[t] for t in s] for s in gold], [[labels[t] for t in s] for s in pred])


def _better(new: float, best: float | None) -> bool:
    return best is None or (not math.isnan(new) and (math.isnan(best) or new > best))


def run_seed(cfg: FinetuneConfig, prep: Prepared, seed: int, device: torch.device, save: Path | None = None) -> dict:
    """Train one seed; the classifier head, dropout and batch order all follow ``seed``. ``save``: where to write
    the model scored on test (``OutDir.staged``, moved to ``OUT/model`` with results.json)."""
    torch.manual_seed(seed)
    model, bf16 = build_model(cfg, prep), uses_autocast(cfg.precision, device)
    if bf16 and cfg.lora_rank:  # before the move: the device never holds the fp32 copies
        frozen_bases_in_bf16(model)
    model = model.to(device)
    pad_id = prep.pad_id
    train = prep.splits["train"]
    loader = torch.utils.data.DataLoader(train.encoded.features, batch_size=cfg.batch_size, shuffle=True,
                                         collate_fn=partial(collate, pad_id=pad_id),
                                         generator=torch.Generator().manual_seed(seed))
    opt, sched = build_optimizer(model, cfg, cfg.epochs * len(loader))
    valid = prep.splits.get("valid")
    evaluate = partial(predict, model, task=cfg.task, pad_id=pad_id, batch_size=2 * cfg.batch_size, device=device,
                       bf16=bf16)
    history, best, best_epoch, stale, diverged = [], None, cfg.epochs, 0, None
    snapshot = BestWeights(model)  # the best valid epoch's trained tensors, on the host
    for epoch in range(1, cfg.epochs + 1):
        try:
            row = {"epoch": epoch, "train_loss": train_epoch(model, loader, opt, sched, cfg, device)}
        except Diverged as e:
            diverged = f"epoch {epoch}: {e}"
            if not snapshot.held:  # no test score: left out of the summary, and said so
                log.warning("seed %d diverged in epoch %d (%s): left out of the summary; %s", seed, epoch, e,
                            remedy(cfg))
                return {"seed": seed, "epoch": epoch, "diverged": diverged, "history": history}
            # The selection by validation had already kept an earlier epoch's weights: that model is scored, as
            # patience would have scored it, and the divergence is recorded beside it.
            log.warning("seed %d diverged in epoch %d (%s): scored at its best valid epoch %d, before it", seed,
                        epoch, e, best_epoch)
            break
        if valid is not None:
            row["valid"] = score(cfg.task, valid.gold, evaluate(valid), prep.labels, cfg.no_relation_label)
            current = row["valid"][cfg.metric]
            if _better(current, best):
                best, best_epoch, stale = current, epoch, 0
                snapshot.keep()
            else:
                stale += 1
        history.append(row)
        log.info("seed %d epoch %d/%d: train loss %.4f%s", seed, epoch, cfg.epochs, row["train_loss"],
                 f", valid {cfg.metric} {row['valid'][cfg.metric]:.4f}" if valid is not None else "")
        if valid is not None and cfg.patience and stale >= cfg.patience:
            break
    if snapshot.held:
        snapshot.restore()
    if valid is None:
        best_epoch = len(history)
    test = prep.splits["test"]
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)  # with --lora-rank, far fewer
    result = {"seed": seed, "epoch": best_epoch, "trainable": trained,
              "test": score(cfg.task, test.gold, evaluate(test), prep.labels, cfg.no_relation_label),
              "history": history}
    if valid is not None:
        result["valid"] = history[best_epoch - 1]["valid"]
    if diverged is not None:
        result["diverged_after"] = diverged  # scored all the same, at an epoch before it
    if save is not None:
        save_finetuned(model, cfg, prep, save)
    return result


def finetune(cfg: FinetuneConfig) -> dict:
    """Every seed, then the summary; writes ``OUT/results.json`` and returns what it wrote."""
    validate(cfg)
    out = OutDir(Path(cfg.out))
    why = unwritable(out.path)  # before the seeds' minutes of training, whose results it will hold
    if why is not None:
        raise FinetuneError(f"--out {cfg.out}: cannot write there ({why})")
    try:
        return _finetune(cfg, out)
    except BaseException:  # Ctrl-C too: no model/ without its results.json, no --out folder it made
        out.failed()
        raise


def _finetune(cfg: FinetuneConfig, out: OutDir) -> dict:
    started = time.time()
    prep = prepare(cfg)
    device = torch.device("cuda" if cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
                          else "cpu")
    staged = out.staged() if cfg.save_model else None
    runs = [run_seed(cfg, prep, seed, device, save=staged if i == 0 else None) for i, seed in enumerate(cfg.seeds)]
    scored = [r for r in runs if "diverged" not in r]
    results = {"config": dataclasses.asdict(cfg), "device": str(device), "max_length": prep.max_length,
               "arithmetic": "bf16 autocast" if uses_autocast(cfg.precision, device) else "fp32",
               "labels": prep.labels, "sizes": {n: len(s.gold) for n, s in prep.splits.items()},
               "selection": "best valid epoch" if "valid" in prep.splits else "last epoch",
               "seeds": runs, "summary": summarize([r["test"] for r in scored]) if scored else {},
               "seconds": round(time.time() - started, 1)}
    if prep.pair_sep:
        results["pair_separator"] = prep.pair_sep
    if len(scored) < len(runs):
        results["diverged"] = [r["seed"] for r in runs if "diverged" in r]
    if "valid" in prep.splits and scored:  # 002 reports KHS this way: its test labels are not public
        results["valid_summary"] = summarize([r["valid"] for r in scored])
    if cfg.task == "classification":
        label, acc = majority_baseline(prep.splits["test"].gold)
        results["majority_baseline"] = {"label": prep.labels[label], "accuracy": acc}
        label, acc = train_majority(prep.splits["train"].gold, prep.splits["test"].gold)
        results["train_majority"] = {"label": prep.labels[label], "accuracy": acc}
    if cfg.task == "relation":  # scores are over the kept examples; these are left out
        results["dropped"] = prep.dropped
        results["markers"] = list(prep.markers)
    if staged is not None and staged.is_dir():  # moved there by out.finish
        results["saved_model"] = str(Path(cfg.out) / "model")
    # NaN (an undefined correlation) is not JSON: write null.
    clean = json.loads(json.dumps(results), parse_constant=lambda c: None)
    out.finish(json.dumps(clean, indent=2, ensure_ascii=False) + "\n")  # an earlier run's results kept aside
    if not scored:
        which = "; ".join(f"seed {r['seed']}: {r['diverged']}" for r in runs)
        raise FinetuneError(f"every seed's training loss became NaN or infinite ({which}), so nothing was scored "
                            f"({out.path / 'results.json'} records them); {remedy(cfg)}")
    return clean

