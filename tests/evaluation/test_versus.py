"""The demos' closing line: the model against the unigram predictor and the uniform guess, said plainly."""
import json

import pytest

from xpt_ds.evaluation.versus import main, versus_line


def test_a_model_below_both_baselines_says_by_how_much():
    line = versus_line(5.2, {"unigram": 5.5, "uniform": 6.5}, "bits_per_char")
    assert line == ("test bits per character (lower is better): trained model 5.200, 0.300 (5.5%) below the unigram "
                    "predictor (5.500) and 1.300 (20.0%) below the uniform guess (6.500)")


def test_a_model_above_the_unigram_predictor_is_said_to_be():
    line = versus_line(5.6, {"unigram": 5.5, "uniform": 6.5}, "bits_per_byte")
    assert "0.100 (1.8%) above the unigram predictor (5.500)" in line
    assert line.endswith("it has not learned more than piece frequencies yet")
    assert "not learned" not in versus_line(5.4, {"unigram": 5.5}, "bits_per_byte")


def test_the_command_reads_evaluate_out_files(tmp_path, capsys):
    for who, bpc in (("model", 5.0), ("unigram", 5.5)):
        (tmp_path / f"{who}.json").write_text(json.dumps({"bits_per_char": bpc, "loss": 1.0}))
    assert main(["--model", str(tmp_path / "model.json"), f"unigram={tmp_path / 'unigram.json'}"]) == 0
    assert "trained model 5.000, 0.500 (9.1%) below the unigram predictor (5.500)" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no bits_per_byte score"):
        main(["--key", "bits_per_byte", "--model", str(tmp_path / "model.json"), f"unigram={tmp_path / 'x.json'}"])
