"""Which prepared corpus a sweep's run trained and was scored on, beyond the paths its config names: a corpus
prepared again in place keeps its paths while its splits (a grown corpus is split anew) and its tokenizer change,
so a rerun's rows would mix test sets without this record."""
from __future__ import annotations

import hashlib
from pathlib import Path


def manifests_sha(specs: list[str]) -> str | None:
    """16 hex of the sha256 over the ``manifest.json`` files that ``specs`` name (``DIR/manifest.json:SPLIT``), in
    their order, each with the split named; None where none names a manifest (shard paths alone). A manifest
    records every shard's sha256 and the tokenizer's, so preparing the corpus again changes it."""
    digest, found = hashlib.sha256(), False
    for spec in specs:
        path, _, split = str(spec).partition(".json:")
        if split:
            manifest = Path(path + ".json")
            digest.update(f"{split}\0".encode())  # a manifest not there yet: the run that reads it says so
            digest.update(manifest.read_bytes() if manifest.is_file() else f"missing {manifest}".encode())
            found = True
    return digest.hexdigest()[:16] if found else None
