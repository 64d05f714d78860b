"""evaluate's inputs checked before its work: a missing shard or split before the model loads, and an ``--out``
that would overwrite one of its own inputs before anything is scored (the other entry points' bad inputs:
tests/cli/test_bad_input.py)."""
import shutil

from conftest import run_main


def test_evaluate_names_a_missing_shard_or_split_before_it_loads_the_model(tmp_path, corpus, monkeypatch, capsys):
    """A mistyped split or shard was said only once the model (or checkpoint) had loaded. Now it is one line
    first, for --shards and --unigram alike, as --text's files already were."""
    import xpt_ds.cli.evaluate as evaluate

    def loaded(a):
        raise AssertionError("the model was loaded")
    monkeypatch.setattr(evaluate, "scored_model", loaded)
    good = f"{corpus}/manifest.json:test"
    for argv, line in [
        (["--shards", f"{corpus}/manifest.json:tset"],
         f"error: manifest {corpus}/manifest.json has no split 'tset' (has train, valid, test)"),
        (["--shards", good, "--unigram", str(tmp_path / "train-{000000..000001}.tar")],
         f"error: shard not found: {tmp_path}/train-000000.tar"),
    ]:
        assert evaluate.main(["--model", str(tmp_path), *argv]) == 2
        assert capsys.readouterr().err.strip().splitlines()[-1].startswith(line)


def test_evaluate_out_never_overwrites_its_own_inputs(tmp_path, tiny_roberta, corpus):
    """``--out`` replaced a corpus's manifest.json or a model's config.json with the scores, exit 0 (both then
    unusable). Now a file of --model, --shards' corpus or --text is refused in one line before any work, and
    left as it was; a new file beside them, or a previous result elsewhere, is written as before."""
    model, data = tmp_path / "model", tmp_path / "corpus"
    shutil.copytree(tiny_roberta, model)
    shutil.copytree(corpus, data)
    spec = f"{data}/manifest.json:test"
    for out, culprit in [(data / "manifest.json", f"would overwrite the input --shards {spec}"),
                         (data / "spm.model", f"would overwrite a file of the input --shards {spec}"),
                         (model / "config.json", f"would overwrite a file of the input --model {model}")]:
        before = out.read_bytes()
        proc = run_main("xpt_ds.cli.evaluate", ["--model", str(model), "--shards", spec, "--out", str(out)])
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        assert proc.stderr.strip().splitlines()[-1] == f"error: --out {out}: {culprit}; give another path"
        assert out.read_bytes() == before
    from xpt_ds.io.paths import check_output_file
    (tmp_path / "scores.json").write_text("{}")
    (model / "eval.json").write_text('{"model": "m", "seq_len": 32}')  # an earlier result: a sweep scores again
    for out in (data / "scores.json", model / "scores.json", tmp_path / "scores.json", model / "eval.json"):
        check_output_file(out, "--out", {"--model": str(model), "--shards": [spec]})
