"""A model source that is no directory (``model.source``, finetune's ``--model``): one line that says what it is
not, at once. Before ``xpt_ds.io.model_source``, 'my_modle' went to the hub as an id, huggingface_hub retried
for 23 s ('Retrying in 8s [Retry 5/5]') and the line spoke only of connecting to huggingface.co; a file was
called a '(local directory)'."""
from __future__ import annotations

import http.server
import json
import socket
import threading
import time

import pytest

from xpt_ds.config import ConfigError, ModelConfig
from xpt_ds.io.model_source import check_model_source
from xpt_ds.model.build import source_config

NEITHER = "config key 'model.source': 'my_modle' is neither a local directory (no such path) nor a model on the " \
          "Hugging Face hub"
QUICK_S = 5.0  # the retries took 23 s; one request to a host that refuses it, well under a second


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # free again once closed: a connection to it is refused at once


@pytest.fixture
def endpoint(monkeypatch):
    """Point huggingface_hub at ``url`` (its URL template is built from HF_ENDPOINT at import)."""
    from huggingface_hub import constants

    def use(url: str) -> str:
        monkeypatch.setattr(constants, "ENDPOINT", url)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}")
        return url
    return use


def _source_error(source: str, caplog, capfd) -> str:
    """``model.source``'s error line, after checking it came fast, alone, and with no retry logged."""
    started = time.perf_counter()
    with pytest.raises(ConfigError) as e:
        source_config(ModelConfig(source=source))
    took = time.perf_counter() - started
    line = str(e.value)
    assert took < QUICK_S, (took, line)
    assert len(line.splitlines()) == 1, line
    said = caplog.text + capfd.readouterr().err
    assert "Retry" not in said and "thrown while requesting" not in said, said
    return line


def test_a_misspelt_name_on_this_machine_is_one_line_naming_both(tmp_path, monkeypatch, caplog, capfd):
    """The real case: the hub as this machine reaches it (without internet: not at all; with it: no such model)."""
    monkeypatch.chdir(tmp_path)
    line = _source_error("my_modle", caplog, capfd)
    assert line.startswith(NEITHER), line


def test_a_name_the_hub_cannot_be_asked_about_is_one_line_naming_both(tmp_path, monkeypatch, endpoint, caplog,
                                                                      capfd):
    """An unreachable hub, and HF_HUB_OFFLINE=1 (which asks nothing): no such directory, no such model reachable."""
    from huggingface_hub import constants
    monkeypatch.chdir(tmp_path)
    url = endpoint(f"http://127.0.0.1:{_closed_port()}")
    line = _source_error("my_modle", caplog, capfd)
    assert line.startswith(f"{NEITHER} reachable from here (cannot reach {url}: "), line
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    line = _source_error("my_modle", caplog, capfd)
    assert line == f"{NEITHER} reachable from here (HF_HUB_OFFLINE is set and it is not in the local cache)"


class _NoSuchRepo(http.server.BaseHTTPRequestHandler):
    """The hub's answer for a repository it does not have (or may not show): 401 with X-Error-Code RepoNotFound."""

    def do_HEAD(self):  # noqa: N802 - http.server's name
        self.send_response(401)
        self.send_header("X-Error-Code", "RepoNotFound")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_a_name_the_hub_does_not_have_is_one_line_naming_both(tmp_path, monkeypatch, endpoint, caplog, capfd):
    monkeypatch.chdir(tmp_path)
    server = http.server.HTTPServer(("127.0.0.1", 0), _NoSuchRepo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = endpoint(f"http://127.0.0.1:{server.server_address[1]}")
        line = _source_error("my_modle", caplog, capfd)
    finally:
        server.shutdown()
        server.server_close()
    assert line == f"{NEITHER} ({url} has no model 'my_modle' this machine may read; a private one needs hf auth login)"


def test_a_name_that_can_only_be_a_path_is_no_such_directory(tmp_path, monkeypatch, endpoint, caplog, capfd):
    """Leading ./ or /, '~', more than one '/', a first part that exists here, a close sibling directory: the hub
    is not asked (an endpoint that would fail differently proves it)."""
    monkeypatch.chdir(tmp_path)
    endpoint(f"http://127.0.0.1:{_closed_port()}")
    (tmp_path / "models/my_model").mkdir(parents=True)
    (tmp_path / "notes.txt").write_text("x")
    key = "config key 'model.source': no such directory"
    cases = {"./my_modle": f"{key}: ./my_modle",
             str(tmp_path / "gone/model"): f"{key}: {tmp_path / 'gone/model'} ({tmp_path / 'gone'} does not exist)",
             "~/my_model": f"{key}: ~/my_model (xpt-ds does not expand '~': write the full path)",
             "a/b/c": f"{key}: a/b/c (a does not exist)",
             "models/my_modle": f"{key}: models/my_modle (did you mean models/my_model?)",
             "models/bert": f"{key}: models/bert",
             "notes.txt/model": f"{key}: notes.txt/model (notes.txt is a file)"}
    for source, want in cases.items():
        assert _source_error(source, caplog, capfd) == want
    (tmp_path / "my_model").mkdir()  # a bare name beside a directory of a close name: a misspelt directory
    assert _source_error("my_modle", caplog, capfd) == f"{key}: my_modle (did you mean my_model?)"


def test_a_file_is_called_a_file_and_a_gguf_file_is_a_source(tmp_path, caplog, capfd):
    notes = tmp_path / "some.txt"
    notes.write_text("x")
    assert _source_error(str(notes), caplog, capfd) == (
        f"config key 'model.source': '{notes}' is a file; a model source is a directory (config.json beside the "
        "weights) or a hub id, or a .gguf file")
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    check_model_source(str(tmp_path / "m.gguf"), "config key 'model.source'", ConfigError, gguf=True)
    with pytest.raises(ConfigError, match="is a file; a model source is a directory .* or a hub id$"):
        check_model_source(str(tmp_path / "m.gguf"), "--model", ConfigError)  # fine-tuning takes no GGUF


def test_a_hub_id_in_the_local_cache_is_not_asked_about(tmp_path, monkeypatch, endpoint):
    """A model the Hugging Face cache holds passes with the hub unreachable (transformers reads the cache)."""
    from huggingface_hub import constants
    snapshot = tmp_path / "hub/models--org--cached/snapshots/abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (tmp_path / "hub/models--org--cached/refs").mkdir()
    (tmp_path / "hub/models--org--cached/refs/main").write_text("abc123")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.chdir(tmp_path)
    endpoint(f"http://127.0.0.1:{_closed_port()}")
    check_model_source("org/cached", "config key 'model.source'", ConfigError)
    with pytest.raises(ConfigError, match="'org/other' is neither a local directory"):
        check_model_source("org/other", "config key 'model.source'", ConfigError)


def test_finetune_model_goes_through_the_same_check(tmp_path, monkeypatch, endpoint, capfd):
    """``xpt-ds finetune --model``: the same lines, the flag and the name first, as its other errors are."""
    from xpt_ds.cli.finetune import main
    monkeypatch.chdir(tmp_path)
    url = endpoint(f"http://127.0.0.1:{_closed_port()}")
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "x", "label": "no"}\n{"text": "y", "label": "yes"}\n')
    files = ["--train", str(data), "--test", str(data), "--out", str(tmp_path / "out")]
    started = time.perf_counter()
    assert main(["--model", "my_modle", *files]) == 2
    assert time.perf_counter() - started < QUICK_S
    err = capfd.readouterr().err
    assert err.startswith("error: --model my_modle is neither a local directory (no such path) nor a model on the "
                          f"Hugging Face hub reachable from here (cannot reach {url}: "), err
    assert len(err.splitlines()) == 1 and "Retry" not in err, err
    assert main(["--model", str(data), *files]) == 2
    assert capfd.readouterr().err == (f"error: --model {data} is a file; a model source is a directory (config.json "
                                      "beside the weights) or a hub id\n")
