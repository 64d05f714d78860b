"""A ``.gguf`` file's tokenizer, its special tokens as the file states them.

transformers reads a GGUF's vocabulary into a Hugging Face tokenizer, but not every release reads its special
tokens right: 5.17.0 (the GPU machines' image) gives SmolLM2-135M-Instruct's GGUF ``<|im_start|>`` (id 1) as
both bos and eos and no pad, where the file says eos 2 and pad 2, as 5.24 reads it. A decoder's rows end each
document with eos, so shards made under one release and trained under the other would disagree on every
document's end. ``load_gguf_tokenizer`` sets bos, eos, unk and pad from the file's own
``tokenizer.ggml.*_token_id`` keys wherever transformers read them otherwise; every GGUF tokenizer of xpt-ds
(the run's, ``model.embedding_init``'s, ``evaluate --text``'s, the decoder study's source) is read through it.
"""
from __future__ import annotations

from pathlib import Path

ROLES = {"bos": "bos_token_id", "eos": "eos_token_id", "unk": "unknown_token_id", "pad": "padding_token_id"}


def gguf_special_ids(path: Path) -> dict[str, int]:
    """``{role: id}`` of the special tokens ``path``'s metadata names (``tokenizer.ggml.<key>``); a role the file
    does not name is left out. Read from the header's scalars alone (``xpt_ds.io.gguf_metadata``)."""
    from xpt_ds.io.gguf_metadata import gguf_scalars

    scalars = gguf_scalars(path)
    return {role: int(scalars[f"tokenizer.ggml.{key}"]) for role, key in ROLES.items()
            if isinstance(scalars.get(f"tokenizer.ggml.{key}"), (int, bool))}


def load_gguf_tokenizer(path: Path):
    """transformers' tokenizer of the GGUF file ``path``, with bos, eos, unk and pad set to the tokens the file
    names (``gguf_special_ids``) where transformers read another one or none. An id beyond the vocabulary is
    left as transformers read it."""
    from transformers import AutoTokenizer

    from xpt_ds.io.trust import UntrustedError, files_naming_code

    path = Path(path)
    # GGUF runs no code, but transformers also reads the configs beside it, and offers to run the code their
    # auto_map names (an interactive prompt): refused first; trust_remote_code=False as well
    named = files_naming_code(path.parent)
    if named:
        raise UntrustedError(f"{path}: {named[0]} beside it names code to run (auto_map), which xpt-ds does not run "
                             "for a GGUF file; put the .gguf in a folder of its own")
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name, trust_remote_code=False)
    for role, i in gguf_special_ids(path).items():
        if 0 <= i < len(tok) and getattr(tok, f"{role}_token_id") != i:
            setattr(tok, f"{role}_token", tok.convert_ids_to_tokens(i))
    return tok
