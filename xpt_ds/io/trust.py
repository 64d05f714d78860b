"""What xpt-ds runs from files it did not write in this process: nothing, unless the user says so.

Two kinds of file can carry code:

- **A model directory's Python** (``auto_map`` in ``config.json`` or ``tokenizer_config.json``), which
  ``transformers`` imports under ``trust_remote_code=True``. ``remote_code_consent`` allows it only when every
  file it names is byte-identical (sha256) to one this installed xpt-ds exports (``xpt_adapters.py`` is
  ``model/methods/adapters.py``, ``xpt_trelm.py`` is ``trelm/hf.py``), or when the user passed ``--trust-remote-code``.
  ``read_config_dict`` reads ``config.json`` as JSON, never through ``AutoConfig`` (which imports the code).
- **A checkpoint's pickles.** ``torch.load`` without ``weights_only`` runs whatever a pickle names.
  ``load_plain`` reads with ``weights_only=True``: tensors, numbers, strings, lists, dicts, plus
  ``PLAIN_GLOBALS``, the few plain-data types DeepSpeed's own files and older xpt-ds RNG files hold. DeepSpeed
  reads its own files with ``weights_only=False`` (0.19, ``TorchCheckpointEngine.load``); ``check_plain``
  first passes each of them through the same restricted unpickler, so a file naming any other global is
  refused before DeepSpeed opens it. ``allow_pickle`` (config ``checkpoint.allow_pickle``, CLI
  ``--allow-pickle``) skips both, for a checkpoint the user wrote and trusts.
"""
from __future__ import annotations

import contextlib
import json
import pickle
import struct
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError

from xpt_ds.errors import UserError, first_line
from xpt_ds.io.digest import sha256_file

_PACKAGE = Path(__file__).resolve().parents[1]
# export name -> the installed file it is a copy of (self-contained: torch and transformers only)
OWN_CODE = {"xpt_adapters.py": _PACKAGE / "model/methods/adapters.py", "xpt_trelm.py": _PACKAGE / "trelm/hf.py"}


class UntrustedError(UserError, ValueError):
    """A file would run code the user did not agree to; the message names the file and the flag."""


def _deepspeed_globals() -> list:
    """The plain-data types DeepSpeed 0.19 pickles into its optimizer files (found with
    ``torch.serialization.get_unsafe_globals_in_checkpoint`` on ZeRO 0-3 fp32/bf16 and ZeRO 1-3 fp16 checkpoints):
    an IntEnum, the loss-scale records (static; fp16's dynamic one) and a namedtuple. None of them runs code when
    rebuilt: no ``__setstate__``, their attributes numbers, flags and a dtype."""
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address
    return [ZeroStageEnum, LossScaler, DynamicLossScaler, fragment_address]


def _numpy_globals() -> list:
    """numpy arrays, as rank_state files written before the RNG state became plain (np.random.get_state()'s
    uint32 key). ``_reconstruct`` makes an empty array of an allowed type; its contents go through the same
    restricted unpickler. numpy 1 pickles name ``numpy.core``, numpy 2 ``numpy._core``."""
    reconstruct = np.ndarray.__reduce__(np.zeros(1))[0]
    return [np.ndarray, np.dtype, type(np.dtype(np.uint32)), reconstruct,
            (reconstruct, "numpy.core.multiarray._reconstruct")]


def plain_globals() -> list:
    return _deepspeed_globals() + _numpy_globals()


def _refusal(path: Path, e: Exception, flag: str) -> UntrustedError:
    return UntrustedError(f"{path} is not plain data and would run code when loaded "
                          f"({first_line(e, 'GLOBAL')[:160]}); xpt-ds does not load it. If you wrote this checkpoint "
                          f"and trust it, pass {flag}")


def load_plain(path: Path, *, allow_pickle: bool = False, mmap: bool = False,
               flag: str = "checkpoint.allow_pickle: true (CLI: --allow-pickle)"):
    """``torch.load`` of a checkpoint file that runs no code: ``weights_only=True`` with ``plain_globals``.
    With ``allow_pickle`` (the user's explicit consent) a full unpickle. A file that names another global is an
    UntrustedError naming the file and ``flag``."""
    path = Path(path)
    plain = contextlib.nullcontext() if allow_pickle else torch.serialization.safe_globals(plain_globals())
    with plain:
        try:
            return torch.load(path, map_location="cpu", weights_only=not allow_pickle, mmap=mmap)
        except pickle.UnpicklingError as e:
            if "GLOBAL" in str(e) or "global" in str(e):  # it names code to run
                raise _refusal(path, e, flag) from None
            raise ValueError(f"not a torch file ({first_line(e, 'Unsupported')[:120]})") from None
        except (KeyError, IndexError, TypeError, AttributeError, UnicodeDecodeError, struct.error,
                EOFError) as e:  # garbage bytes
            raise ValueError(f"not a torch file ({type(e).__name__}: {e})") from None
        except RuntimeError as e:  # mmap needs torch.save's zip format; an old-format file is read whole
            if mmap and "zip" in str(e).lower():
                return load_plain(path, allow_pickle=allow_pickle, flag=flag)
            raise


@contextlib.contextmanager
def reading_weights(what: str, error: type[UserError] = UserError):
    """Around a ``from_pretrained`` of a model directory xpt-ds did not write: weights that would run code when
    unpickled (transformers reads a ``.bin`` with ``weights_only=True`` and refuses the pickle) are an
    UntrustedError, and weights it cannot read (a truncated safetensors or zip file) an ``error``, each one line
    that starts with ``what`` (the flag or config key that named the directory)."""
    try:
        yield
    except pickle.UnpicklingError as e:
        raise UntrustedError(f"{what}: its weights file is not plain data and would run code when loaded "
                             f"({first_line(e, 'GLOBAL')[:160]}); xpt-ds does not load it (save the model as "
                             "safetensors)") from None
    except (RuntimeError, EOFError, SafetensorError) as e:  # truncated or not a weights file
        raise error(f"{what}: cannot read its weights ({first_line(e)[:200]})") from None


def check_plain(paths: list[Path], *, allow_pickle: bool = False,
                flag: str = "checkpoint.allow_pickle: true (CLI: --allow-pickle)") -> None:
    """Raise UntrustedError unless each file passes ``load_plain``; run before a library (DeepSpeed) loads them
    with a full unpickle. The restricted unpickler accepts exactly the pickles whose globals are allowed, so the
    full one then calls nothing else. Memory-mapped: only the pickle itself is read, not the tensors."""
    if allow_pickle:
        return
    for path in paths:
        load_plain(path, mmap=True, flag=flag)


def read_config_dict(model: str, what: str = "--model") -> dict:
    """A model's ``config.json`` as a dict (a local directory or a hub id), read as JSON: no code runs."""
    path = model_file(model, "config.json")
    if path is None:
        raise FileNotFoundError(f"{what} {model}: no config.json (a Hugging Face model directory or hub id)")
    return _json_object(path, f"{what} {model}")


def _json_object(path: Path, whose: str) -> dict:
    """``path``'s JSON object; anything else (not JSON, cut short, a list) is one UntrustedError naming it."""
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UntrustedError(f"{whose}: {path} is not valid JSON ({e})") from None
    if not isinstance(found, dict):
        raise UntrustedError(f"{whose}: {path} holds a JSON {type(found).__name__}, not an object")
    return found


def model_file(model: str, name: str) -> Path | None:
    """A file of a local model directory or a hub repository (downloaded, not executed), or None if absent."""
    local = Path(model)
    if local.is_dir():
        return local / name if (local / name).is_file() else None
    from transformers.utils import cached_file
    found = cached_file(model, name, _raise_exceptions_for_missing_entries=False,
                        _raise_exceptions_for_connection_errors=False)
    return Path(found) if found else None


def first_file(model: str, names) -> Path | None:
    """The first of ``names`` that a local model directory or a hub repository has (as ``model_file``), or None."""
    return next((path for path in (model_file(model, name) for name in names) if path is not None), None)


def _code_refs(config: dict, path: Path, model: str) -> list[str]:
    """The ``auto_map`` values of ``config`` (read from ``path``): 'module.Class', 'repo--module.Class', or
    [slow, fast] for tokenizers. Any other shape is one UntrustedError naming the file."""
    auto_map = config.get("auto_map") or {}
    if not isinstance(auto_map, dict):
        raise UntrustedError(f"{model}: {path} has an auto_map that is not an object of class references")
    refs = []
    for value in auto_map.values():
        refs += [v for v in (value if isinstance(value, (list, tuple)) else [value]) if v]
    if not all(isinstance(ref, str) for ref in refs):
        raise UntrustedError(f"{model}: {path} has an auto_map entry that is not a class reference such as "
                             "'module.Class'")
    return refs


def files_naming_code(folder: Path) -> list[Path]:
    """The ``config.json`` and ``tokenizer_config.json`` of a local ``folder`` whose ``auto_map`` names code: what
    transformers would offer to run when it reads the folder for a file it holds (a GGUF's tokenizer)."""
    found = [folder / name for name in ("config.json", "tokenizer_config.json") if (folder / name).is_file()]
    return [path for path in found if _code_refs(_json_object(path, str(folder)), path, str(folder))]


def remote_code_files(model: str) -> list[str]:
    """The code files (relative paths, or 'repo--module' for code in another repository) that loading
    ``model`` with ``trust_remote_code=True`` would import: every module its config's and its tokenizer
    config's ``auto_map`` name. Empty for a model that ships no code."""
    refs = _code_refs(read_config_dict(model), model_file(model, "config.json"), model)
    tok_cfg = model_file(model, "tokenizer_config.json")
    if tok_cfg is not None:
        refs += _code_refs(_json_object(tok_cfg, model), tok_cfg, model)
    files = []
    for ref in refs:
        repo, _, module = ref.rpartition("--")
        name = module.rsplit(".", 1)[0].replace(".", "/") + ".py"
        files.append(f"{repo}--{name}" if repo else name)
    return sorted(set(files))


def own_code_digests() -> set[str]:
    """sha256 of every code file this installed xpt-ds writes into an export."""
    return {sha256_file(src) for src in OWN_CODE.values()}


def remote_code_consent(model: str, trust_remote_code: bool = False, flag: str = "--trust-remote-code") -> bool:
    """The ``trust_remote_code`` to load ``model`` with. False when it ships no code; True when every code file
    it names is one this xpt-ds exports, byte for byte, or when the user passed ``flag``
    (``trust_remote_code``); otherwise an UntrustedError naming the first other file and the flag."""
    files = remote_code_files(model)
    if not files:
        return False
    ours = own_code_digests()
    for name in files:
        path = None if "--" in name else model_file(model, name)
        if path is None or sha256_file(path) not in ours:
            if trust_remote_code:
                return True
            why = ("is code from another repository" if "--" in name else "is missing" if path is None
                   else "is not the code this xpt-ds exports (sha256 differs)")
            raise UntrustedError(f"{model}: {name} {why}; loading the model would run it. Pass {flag} if you "
                                 f"trust whoever wrote {model}")
    return True
