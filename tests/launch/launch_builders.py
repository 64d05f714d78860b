"""What the launcher tests share: ``two_nodes``, launch/multi_node.sh as two torchrun "nodes" on loopback
(test_launch, and the run-lock test of two nodes sharing a run directory)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from conftest import REPO, free_port


def two_nodes(tmp_path, cfg: Path, extras=((), ())) -> tuple[list[int], list[str]]:
    """launch/multi_node.sh as two torchrun "nodes" of one process each on loopback, node r given the overrides
    ``extras[r]``: (exit codes, outputs)."""
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "NNODES": "2", "NPROC_PER_NODE": "1", "OMP_NUM_THREADS": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "CONFIG": str(cfg)}
    nodes = [subprocess.Popen(["bash", str(REPO / "launch/multi_node.sh"), *extra], env={**env, "NODE_RANK": str(r)},
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r, extra in enumerate(extras)]
    outs = [n.communicate(timeout=600)[0] for n in nodes]
    return [n.returncode for n in nodes], outs


def decoder_payload(payload: Path, decoder: Path, corpus: Path) -> Path:
    """A payload of launch/gpu_decoder_payload.sh's layout from test fixtures, for ``--dry-run`` (which reads
    configs, manifests and tokenizers, never shards or weights): ``source/``, the tiny ``decoder`` with a
    tokenizer of its own and the record that spares the GGUF's conversion; ``source.gguf``, a stand-in of that
    record's size; ``uk/``, ``uk_src/`` and ``uk_ext/``, the prepared ``corpus`` (uk_src's manifest counting twice
    its train pieces, as a source tokenizer cuts the same documents into more); ``uk_ext_tok/``, a tokenizer
    directory; ``text/``, the two score texts."""
    import json
    import shutil

    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    shutil.copytree(decoder, payload / "source")
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.Whitespace()
    bpe.train_from_iterator(["the cat sat on the mat", "a dog ran to the park"] * 5,
                            trainers.BpeTrainer(vocab_size=60, special_tokens=["<s>", "<pad>", "</s>", "<unk>"]))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", pad_token="<pad>", eos_token="</s>",
                                  unk_token="<unk>")
    tok.save_pretrained(str(payload / "source"))
    tok.save_pretrained(str(payload / "uk_ext_tok"))
    (payload / "source.gguf").write_bytes(b"GGUF" + bytes(60))
    (payload / "source/source.json").write_text(json.dumps({"gguf": "source.gguf", "bytes": 64}) + "\n")
    for name in ("uk", "uk_src", "uk_ext"):
        shutil.copytree(corpus, payload / name)
    manifest = payload / "uk_src/manifest.json"
    m = json.loads(manifest.read_text())
    m["splits"]["train"]["tokens"] *= 2
    manifest.write_text(json.dumps(m))
    (payload / "text").mkdir()
    (payload / "text/en.txt").write_text("the cat sat on the mat\n")
    (payload / "text/uk.txt").write_text("кіт сидів на килимку\n")
    return payload
