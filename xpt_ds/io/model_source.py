"""Where a model named by a config key or a flag is (``model.source``, finetune's ``--model``): a local directory,
or a Hugging Face hub id. ``check_model_source`` tells them apart before anything is loaded.

Without it a name that was no directory went to the hub as an id: huggingface_hub 2.4 retries a request that
cannot connect five times (1 + 2 + 4 + 8 + 8 s, ``utils._http.http_backoff``, 23 log lines) and transformers then
said only that it could not connect to huggingface.co, never that no such directory exists (measured: 30 s from
``xpt-ds train --model.source=my_modle`` to that line, on a machine without internet). Here a name that can only be
a path is "no such directory" at once; a name that can be either is looked up in the Hugging Face cache, then asked
of the hub once, without retries (``get_hf_file_metadata``'s ``retry_on_errors=False``), and if neither has it the
one line names both.
"""
from __future__ import annotations

import difflib
import itertools
from pathlib import Path

from xpt_ds.errors import UserError, first_line

HUB_TIMEOUT_S = 10  # huggingface_hub's own timeout for this request (HF_HUB_ETAG_TIMEOUT's default)


def check_model_source(name: str, what: str, error: type[UserError] = UserError, gguf: bool = False) -> None:
    """Return if ``name`` is a directory, a ``.gguf`` file (where ``gguf``: a valid source, docs/decoders.md), a hub
    id in the local Hugging Face cache, or one the hub has; else raise ``error``, one line that starts with ``what``
    (the config key or flag; a ``what`` that holds ``name``, as '--model DIR', is not followed by it again)."""
    path, named = Path(name), name in what
    who = what if named else f"{what}: '{name}'"
    if path.is_dir():
        return
    if path.exists():
        if gguf and path.suffix == ".gguf":
            return
        raise error(f"{who} is a file; a model source is a directory (config.json beside the weights) or a hub id"
                    f"{', or a .gguf file' if gguf else ''}")
    close = _close_directory(path)
    if close or not _can_be_hub_id(name):  # a path: the hub is not asked
        hint = f" (did you mean {close}?)" if close else _missing_part(path)
        raise error(f"{what}: no such directory{'' if named else f': {name}'}{hint}")
    _check_hub(name, who, error)


def _can_be_hub_id(name: str) -> bool:
    """'name' or 'org/name' in the hub's characters, and not a path whose first part exists here
    ('models/bert' with ./models present leans to the path)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id
    try:
        validate_repo_id(name)  # refuses '/...', './...', '~/...', 'a/b/c', '..', spaces
    except HFValidationError:
        return False
    return not ("/" in name and Path(name.split("/")[0]).exists())


def _existing_base(path: Path) -> tuple[Path, list[str]]:
    """(the longest leading part of ``path`` that is a directory here, the parts after it)."""
    base = Path(path.anchor or ".")
    parts = list(path.parts[1:] if path.anchor else path.parts)
    while parts and (base / parts[0]).is_dir():
        base = base / parts.pop(0)
    return base, parts


def _close_directory(path: Path) -> Path | None:
    """A missing ``path`` with its first missing part replaced by a directory beside it with a close name
    (models/my_modle -> models/my_model), or None: a misspelt directory, not a hub id."""
    base, parts = _existing_base(path)
    if not parts:
        return None
    try:
        dirs = [e.name for e in itertools.islice(base.iterdir(), 5000) if e.is_dir()]
    except OSError:
        return None
    close = difflib.get_close_matches(parts[0], dirs, n=1, cutoff=0.8)
    return Path(base, close[0], *parts[1:]) if close else None


def _missing_part(path: Path) -> str:
    """The end of a 'no such directory' line: a missing part above the last one, or an unexpanded '~'."""
    if path.parts[:1] == ("~",):
        return " (xpt-ds does not expand '~': write the full path)"
    base, parts = _existing_base(path)
    if len(parts) < 2:
        return ""
    return f" ({base / parts[0]} {'is a file' if (base / parts[0]).exists() else 'does not exist'})"


def _check_hub(name: str, who: str, error: type[UserError]) -> None:
    """Return if the Hugging Face cache or the hub has ``name``'s config.json; else raise ``error`` naming both
    places and why the hub does not have it (offline mode, unreachable, no such repository)."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url, try_to_load_from_cache
    from huggingface_hub.errors import EntryNotFoundError, GatedRepoError, HfHubHTTPError, RepositoryNotFoundError
    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return  # transformers reads it from the cache, also offline
    neither = f"{who} is neither a local directory (no such path) nor a model on the Hugging Face hub"
    if constants.is_offline_mode():
        raise error(f"{neither} reachable from here (HF_HUB_OFFLINE is set and it is not in the local cache)")
    try:
        get_hf_file_metadata(hf_hub_url(name, "config.json"), timeout=HUB_TIMEOUT_S, retry_on_errors=False)
    except EntryNotFoundError:
        return  # a repository without config.json: the loader's own error names what it lacks
    except GatedRepoError:
        raise error(f"{who} is no local directory, and on the Hugging Face hub it is gated: accept its terms on "
                    "its page and log in (hf auth login)") from None
    except RepositoryNotFoundError:
        raise error(f"{neither} ({constants.ENDPOINT} has no model '{name}' this machine may read; a private one "
                    "needs hf auth login)") from None
    except HfHubHTTPError as e:
        raise error(f"{neither} that answers ({first_line(e)[:160]})") from None
    except Exception as e:  # noqa: BLE001 - httpx's connection errors and timeouts, which share no base with OSError
        raise error(f"{neither} reachable from here (cannot reach {constants.ENDPOINT}: "
                    f"{first_line(e)[:160]})") from None
