"""``python -m xpt_ds.cli.evaluate (--run RUN [--tag TAG] | --model DIR) --shards SPEC [SPEC ...] [--out FILE]
[--card [README]]``, or ``python -m xpt_ds.cli.evaluate --model DIR_OR_GGUF --text FILE [FILE ...] [--out FILE]``

002 Table 2's intrinsic metrics (PPL, Hits@1/3/5/10, MRR, MR, bits per character, per word and per byte) on the
masked tokens of held-out shards, as JSON (``xpt_ds.evaluation.intrinsic`` says which figure compares what); for
a decoder, on every next token.

``--unigram TRAIN_SPEC`` scores the unigram predictor instead of the model, on the same masked tokens: every
masked position gets each piece's add-one-smoothed frequency in the training shards. A model whose figures
equal the unigram predictor's has learned no context yet. ``--uniform`` scores the uniform guess, the figure
of a model that has learned nothing.

``--text FILE`` scores a decoder on raw text instead, one document a line, tokenized by the model's own tokenizer:
bits per byte, which compares across tokenizers (``xpt_ds.evaluation.text_bpb``). ``--model`` may then also be a
stock decoder xpt-ds did not write (the English source: a directory, a hub id, or a ``.gguf`` file): the same
English file scored for the source and for an export of any method says what the adaptation cost English.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from xpt_ds.config.job import MASKINGS
from xpt_ds.errors import ArgumentParser, cli_errors
from xpt_ds.runtime.process_exit import exit_process

# --text's --dtype: float32 by default, whatever the files store, so that a source (often bf16 on the hub) and an
# export (fp32) are scored alike. On 80 lines of English (2026-11-30), SmolLM2-135M's fp32 weights read 1.70020 bits
# per byte; the same weights rounded to bf16 read 1.70028 run in float32 and 1.69926 run in bf16 (auto).
TEXT_DTYPES = ("float32", "bfloat16", "auto")


def warn_trained_on(scored: list[str], train: list[str]) -> None:
    """A ``warning:`` line when shards ``--shards`` scores are among the run's ``data.train_shards``: the figures
    are then not held out. Silent where the training shards are not here."""
    from xpt_ds.config import ConfigError
    from xpt_ds.data.manifest import expand_shards
    try:
        both = sorted({str(Path(f).resolve()) for f in expand_shards(list(scored))}
                      & {str(Path(f).resolve()) for f in expand_shards(list(train))})
    except (ConfigError, OSError, ValueError):
        return
    if both:
        print(f"warning: {len(both)} of the shards scored ({both[0]}{', ...' if len(both) > 1 else ''}) are in the "
              "run's data.train_shards: these figures are on training data, not held out", file=sys.stderr)


@cli_errors
def main(argv: list[str] | None = None) -> int:
    a, p = parse_args(argv)
    if a.text:
        return evaluate_text(a, p)
    if a.dtype is not None:
        p.error("--dtype is for --text; --shards scores an export or checkpoint in float32")
    return evaluate_shards(a)


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, argparse.ArgumentParser]:
    p = ArgumentParser(prog="xpt-ds evaluate", description="\n\n".join(__doc__.split("\n\n")[1:3]))
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--run", type=Path, help="run directory: evaluate a checkpoint")
    src.add_argument("--model", type=Path, help="an xpt_ds.cli.export directory; with --text also a stock decoder: "
                     "a directory, a hub id or a .gguf file")
    p.add_argument("--tag", help="with --run: checkpoint tag, or 'best' (checkpoint.keep_best) (default: newest "
                   "complete)")
    scored = p.add_mutually_exclusive_group(required=True)
    scored.add_argument("--shards", nargs="+", help="held-out shards: paths, brace patterns, "
                        "or MANIFEST.json:SPLIT (e.g. data/ko/manifest.json:test)")
    scored.add_argument("--text", nargs="+", type=Path, metavar="FILE", help="with --model, a decoder: bits per "
                        "byte on UTF-8 text files, one document a line, in the model's own tokenizer (English: "
                        "xpt-data bible's en.txt, the Berean Standard Bible, public domain; Ukrainian: xpt-data "
                        "uagec's text/test.txt, UA-GEC, CC BY 4.0)")
    p.add_argument("--seq-len", type=int, help="default: the run's data.seq_len (an export carries it; one "
                   "written before 2026-11-27: 512, capped by the model); with --text the model's positions, "
                   "else 1024")
    p.add_argument("--seed", type=int, help="mask seed (default: the run's data.seed, else 0)")
    p.add_argument("--masking", choices=MASKINGS, help="what the evaluation masks (default: the run's data.masking, "
                   "else token); runs trained with different data.masking compare only under the same --masking")
    p.add_argument("--on-corrupt-shard", choices=("fail", "skip"), help="a corrupt shard stops the evaluation (fail) "
                   "or is left out and listed in the JSON's skipped_shards (skip) (default: the run's "
                   "data.on_corrupt_shard, else fail)")
    p.add_argument("--batch-size", type=int, default=16, help="sequences per forward pass")
    p.add_argument("--max-batches", type=int, default=0, help="stop after N batches (0 = every token)")
    baseline = p.add_mutually_exclusive_group()
    baseline.add_argument("--unigram", nargs="+", metavar="TRAIN_SPEC", help="score the unigram predictor of these "
                          "training shards (piece frequencies, add-one) instead of the model, on the same masked "
                          "tokens")
    baseline.add_argument("--uniform", action="store_true", help="score the uniform guess over the vocabulary's "
                          "pieces instead of the model, on the same masked tokens")
    p.add_argument("--dtype", choices=TEXT_DTYPES, help="with --text: the dtype the model is loaded and run in "
                   "(default float32, so that a source stored in bf16 and an fp32 export are scored alike; auto: as "
                   "its files store it)")
    p.add_argument("--samples", type=int, default=3, help="a decoder: sample continuations of the first N test "
                   "documents' openings into the report (seeded, top-p 0.9; 0 = none)")
    p.add_argument("--out", type=Path, help="also write the JSON here")
    p.add_argument("--card", nargs="?", const="", metavar="README", help="with --model: add the scores to the "
                   "export's model card (its README.md, or this file), in place of the section of an earlier "
                   "evaluation of the same shards and settings")
    p.add_argument("--trust-remote-code", action="store_true", help="with --model: run Python the directory "
                   "ships that is not this xpt-ds's own export code (only for a model you trust)")
    p.add_argument("--allow-pickle", action="store_true", help="with --run: read checkpoint files that are not "
                   "plain data (they can run code): only for a checkpoint you trust")
    a = p.parse_args(argv)
    for flag, value, least in (("--seq-len", a.seq_len, 8), ("--batch-size", a.batch_size, 1),
                               ("--max-batches", a.max_batches, 0), ("--samples", a.samples, 0),
                               ("--seed", a.seed, 0)):
        if value is not None and value < least:
            p.error(f"{flag} must be >= {least}, got {value}")
    if a.model is not None and a.tag is not None:
        p.error("--tag picks a checkpoint of --run; an export (--model) has none")
    if a.card is not None and a.model is None:
        p.error("--card adds the scores of an export (--model) to its model card; export the run first")
    return a, p


def evaluate_shards(a: argparse.Namespace) -> int:
    """``--shards``: the model's (or a baseline's) intrinsic metrics on held-out shards, as JSON."""
    import torch

    from xpt_ds.evaluation.intrinsic import UnigramPredictor, evaluate
    from xpt_ds.io.paths import check_output_file
    if a.out is not None:
        check_output_file(a.out, "--out", {"--model": a.model, "--run": a.run, "--shards": a.shards,
                                           "--unigram": a.unigram})
    card = None
    if a.card is not None:  # before the model is read and evaluated: the card will hold the result
        from xpt_ds.export.model_card import card_file
        from xpt_ds.evaluation.intrinsic import check_not_a_run
        check_not_a_run(a.model)
        card = card_file(Path(a.card) if a.card else a.model)
    from xpt_ds.data.manifest import expand_shards
    for specs in (a.shards, a.unigram or []):  # a missing shard, manifest or split: before the model loads
        expand_shards(specs)  # (the tokenizer each manifest records is checked against the model's after it)
    model, tok, data, source, causal = scored_model(a)
    if a.unigram:
        model = UnigramPredictor.from_shards(a.unigram, tok, data.on_corrupt_shard, causal)
        source["unigram"] = a.unigram
        if model.skipped:  # its counts leave these training shards out
            source["unigram_skipped_shards"] = model.skipped
    elif a.uniform:
        model, source["uniform"] = UnigramPredictor.uniform(tok, causal), True
    device = "cuda" if torch.cuda.is_available() else "cpu"
    metrics = evaluate(model, tok, data, a.shards, a.batch_size, a.max_batches, device, causal)
    masked = {"objective": "next_token"} if causal else {"seed": data.seed, "masking": data.masking}
    if causal and a.samples > 0 and not (a.unigram or a.uniform):
        from xpt_ds.evaluation.samples import held_out_prompts, sample_continuations
        prompts = held_out_prompts(a.shards, tok, a.samples, prompt_pieces=8, on_corrupt=data.on_corrupt_shard)
        metrics["samples"] = sample_continuations(model, tok, prompts, seed=data.seed, device=device)
    emit({**source, "shards": a.shards, "seq_len": data.seq_len, **masked, **metrics}, a.out)
    if card is not None:
        add_to_card(card, a, data.seq_len, masked, metrics)
    return 0


def scored_model(a: argparse.Namespace):
    """(model, tokenizer, data config with the flags applied, the JSON's source fields, whether it is a decoder)
    of ``--run`` (a checkpoint) or ``--model`` (an export)."""
    from xpt_ds.config import ConfigError
    from xpt_ds.data.tokenizer import saved_tokenizer
    from xpt_ds.evaluation.intrinsic import export_data_config, load_export
    from xpt_ds.model.decoder import is_decoder
    if a.run is not None:
        from xpt_ds.export.hf import load_model
        from xpt_ds.checkpoint.store import read_config
        model, tag_dir = load_model(a.run, a.tag, a.allow_pickle)
        run_cfg = read_config(tag_dir.parent, tag_dir.name, a.allow_pickle)
        tok, data = saved_tokenizer(tag_dir, run_cfg.model.mask_token), run_cfg.data
        source = {"run": str(a.run), "tag": tag_dir.name}
        warn_trained_on(a.shards, data.train_shards)
    else:
        model, tok = load_export(a.model, a.trust_remote_code)
        data = export_data_config(model.config, a.model)
        source = {"model": str(a.model)}
    data.seq_len = a.seq_len or data.seq_len
    data.seed = data.seed if a.seed is None else a.seed
    data.masking = a.masking or data.masking
    data.on_corrupt_shard = a.on_corrupt_shard or data.on_corrupt_shard
    if data.seq_len > getattr(model.config, "xpt_max_length", data.seq_len):
        raise ConfigError(f"--seq-len {data.seq_len} exceeds the model's {model.config.xpt_max_length} positions")
    causal = is_decoder(model.config)  # next-token scores on every piece (a decoder), else masked ones
    if causal and a.masking:
        raise ConfigError(f"--masking {a.masking}: {a.model or a.run} is a decoder, scored on every next token; "
                          "--masking is for masked LMs")
    return model, tok, data, source, causal


def evaluate_text(a: argparse.Namespace, p: argparse.ArgumentParser) -> int:
    """``--text``: each file's bits per byte under the model's own tokenizer, as JSON."""
    for flag, given in (("--run", a.run), ("--card", a.card), ("--unigram", a.unigram), ("--uniform", a.uniform),
                        ("--masking", a.masking), ("--seed", a.seed), ("--on-corrupt-shard", a.on_corrupt_shard),
                        ("--max-batches", a.max_batches or None)):
        if given not in (None, False):
            p.error(f"{flag} is for --shards; --text scores a --model on every piece of the text")
    import torch

    from xpt_ds.evaluation.text_bpb import DEFAULT_SEQ_LEN, load_decoder, max_positions, read_documents, score_file
    from xpt_ds.io.paths import check_output_file
    if a.out is not None:
        check_output_file(a.out, "--out", {"--model": a.model, "--text": a.text})
    for path in a.text:  # every file readable before the model loads
        read_documents(path)
    model, tokenizer = load_decoder(a.model, a.trust_remote_code, a.dtype or "float32")
    limit = max_positions(model.config)
    seq_len = a.seq_len or limit or DEFAULT_SEQ_LEN
    if limit is not None and seq_len > limit:
        p.error(f"--seq-len {seq_len} exceeds the model's {limit} positions")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device)
    text = {str(path): score_file(model, tokenizer, path, seq_len, a.batch_size, device) for path in a.text}
    emit({"model": str(a.model), "seq_len": seq_len, "dtype": str(model.dtype).removeprefix("torch."),
          "objective": "next_token", "text": text}, a.out)
    return 0


def emit(result: dict, out: Path | None) -> None:
    """``emit_json``'s JSON on stdout, and in ``out`` when given, written whole or not at all
    (``write_text_atomic``): an interrupted or failed write leaves an earlier file as it was, never part of one."""
    from xpt_ds.evaluation.intrinsic import emit_json
    from xpt_ds.io.paths import write_text_atomic
    emit_json(result, None)
    if out:
        write_text_atomic(out, json.dumps(result, indent=2, ensure_ascii=False) + "\n")


def add_to_card(card: Path, a: argparse.Namespace, seq_len: int, masked: dict, metrics: dict) -> None:
    """The scores into the card, keyed by what was scored: the same shards and settings replace their section."""
    from xpt_ds.export.model_card import add_evaluation
    scorer = {"scorer": {"unigram": a.unigram}} if a.unigram else {"scorer": "uniform"} if a.uniform else {}
    part = {"max_batches": a.max_batches, "batch_size": a.batch_size} if a.max_batches else {}
    setting = {"shards": a.shards, "seq_len": seq_len, **masked, **scorer, **part}
    who = (f"The unigram predictor of {', '.join(f'`{s}`' for s in a.unigram)} (a baseline)" if a.unigram else
           "The uniform guess (a baseline)" if a.uniform else "The model")
    replaced = add_evaluation(card, setting, metrics, who)
    print(f"{'replaced its section in' if replaced else 'added a section to'} {card}", file=sys.stderr)


if __name__ == "__main__":
    exit_process(main())
