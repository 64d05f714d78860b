"""A source named by a hub id: the builder fetches, through the real huggingface_hub client, the weight files
transformers would load and no others (Mistral's repositories ship model-*-of-*.safetensors beside a
consolidated.safetensors of the same size, older ones .bin copies beside safetensors), and builds the same model
as from the directory, then offline from the cache. The hub is a local HTTP server that answers as the hub's
file endpoints do (HEAD and GET of /REPO/resolve/REVISION/FILE with the commit, etag and size headers, 404 with
X-Error-Code for a missing file)."""
from __future__ import annotations

import hashlib
import http.server
import shutil
import threading

import pytest
import torch

from xpt_ds.config import ConfigError, ModelConfig
from xpt_ds.model.build import load_source_model

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class _Hub(http.server.ThreadingHTTPServer):
    def __init__(self, repos: dict):
        super().__init__(("127.0.0.1", 0), _Files)
        self.repos, self.got = repos, []  # repo id -> directory; (method, repo, file) of every file request

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Files(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        """Each request is kept in ``server.got``; nothing goes to stderr."""

    def do_HEAD(self):
        self._answer(body=False)

    def do_GET(self):
        self._answer(body=True)

    def _answer(self, body: bool) -> None:
        parts = self.path.split("?")[0].strip("/").split("/")
        repo, filename = "/".join(parts[:2]), "/".join(parts[4:])
        directory = self.server.repos.get(repo)
        if len(parts) < 5 or parts[2] != "resolve" or directory is None:
            return self._missing("RepoNotFound")
        self.server.got.append((self.command, repo, filename))
        path = directory / filename
        if not path.is_file():
            return self._missing("EntryNotFound")
        data = path.read_bytes()
        self.send_response(200)
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def _missing(self, code: str) -> None:
        self.send_response(404)
        self.send_header("X-Error-Code", code)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A local hub serving {repo id: directory}, and the Hugging Face cache in tmp_path."""
    from huggingface_hub import constants
    server = _Hub({})
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(constants, "ENDPOINT", server.url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                        server.url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.chdir(tmp_path)
    yield server
    server.shutdown()
    server.server_close()


def _repo(tmp_path, tiny_decoder, name: str, shard_bytes: int | None = None):
    """A tiny Llama saved as the hub holds it (sharded when ``shard_bytes``), with copies transformers never
    loads beside it: pytorch_model.bin and consolidated.safetensors."""
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(tiny_decoder("llama", False))
    out = tmp_path / name
    model.save_pretrained(out, max_shard_size=shard_bytes or "5GB")
    torch.save(model.state_dict(), out / "pytorch_model.bin")
    shutil.copy(next(out.glob("model*.safetensors")), out / "consolidated.safetensors")
    return out


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("sharded", [False, True], ids=["single-file", "sharded"])
def test_a_hub_source_fetches_only_the_weights_transformers_loads(tmp_path, tiny_decoder, hub, sharded):
    repo = _repo(tmp_path, tiny_decoder, "repo", 40_000 if sharded else None)
    shards = sorted(p.name for p in repo.glob("model-*-of-*.safetensors"))
    assert len(shards) > 1 if sharded else not shards
    hub.repos["org/llama"] = repo
    from_hub, missing = load_source_model(ModelConfig(source="org/llama", tokenizer="unused.model"))
    from_dir, _ = load_source_model(ModelConfig(source=str(repo), tokenizer="unused.model"))
    assert _same(from_hub, from_dir) and not missing
    fetched = {f for method, _, f in hub.got if method == "GET"}
    weights = {"model.safetensors.index.json", *shards} if sharded else {"model.safetensors"}
    assert weights <= fetched and not fetched & {"pytorch_model.bin", "consolidated.safetensors"}, hub.got
    assert {f for f in fetched if f.endswith((".safetensors", ".bin"))} == weights - {"model.safetensors.index.json"}
    # then offline, as a compute node without internet resumes the run: the same model from the cache, no request
    from huggingface_hub import constants
    hub.got.clear()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(constants, "HF_HUB_OFFLINE", True)
        offline, _ = load_source_model(ModelConfig(source="org/llama", tokenizer="unused.model"))
    assert _same(offline, from_dir) and hub.got == []


def test_a_hub_source_without_weights_is_one_line(tmp_path, tiny_decoder, hub):
    repo = _repo(tmp_path, tiny_decoder, "bare")
    for weights in [*repo.glob("*.safetensors"), *repo.glob("*.bin")]:
        weights.unlink()
    hub.repos["org/bare"] = repo
    with pytest.raises(ConfigError) as e:
        load_source_model(ModelConfig(source="org/bare", tokenizer="unused.model"))
    assert str(e.value) == ("config key 'model.source': org/bare: hub id 'org/bare' has no weights (model.safetensors, "
                            "model-*-of-*.safetensors with model.safetensors.index.json, or pytorch_model.bin)")
