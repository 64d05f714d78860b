"""What a checkpoint holds besides the engine's own state: each piece registers once, under the key it is saved at,
and saving and loading walk the registry (torchtitan's ``CheckpointManager(states={...})`` idea).

Two scopes, because DeepSpeed writes client state from rank 0 only:
- ``client``: in the engine's client state, the same on every rank (trainer state, data stream, best tracker, ...);
- ``per_rank``: in the rank's own ``rank_state_RANK.pt`` (the RNG: each rank draws its own dropout).

A piece is anything with ``state_dict()`` and ``load_state_dict(state)``. A key that an older checkpoint lacks is
left as constructed (a fresh start of that piece); ``load`` returns such keys so that the caller can say so.
Older layouts of a present key are rewritten first, in ``xpt_ds.checkpoint.migrate``.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol


class Stateful(Protocol):
    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any) -> None: ...


class StateRegistry:
    def __init__(self) -> None:
        # key -> (save, load): a piece's state_dict and load_state_dict; a recorded value has no load
        self.client: dict[str, tuple[Callable[[], Any], Callable[[Any], None] | None]] = {}
        self.per_rank: dict[str, tuple[Callable[[], Any], Callable[[Any], None] | None]] = {}

    def register(self, key: str, piece: Stateful, per_rank: bool = False) -> None:
        self._add(key, (piece.state_dict, piece.load_state_dict), per_rank)

    def record(self, key: str, get: Callable[[], Any]) -> None:
        """A value saved for readers (export, model card, resume checks), never restored into the run: the config,
        the parameters' tags, the embedding start's report."""
        self._add(key, (get, None), False)

    def _add(self, key: str, entry, per_rank: bool) -> None:
        if key in self.client or key in self.per_rank:
            raise ValueError(f"checkpoint state '{key}' is registered twice")
        (self.per_rank if per_rank else self.client)[key] = entry

    def client_state(self) -> dict[str, Any]:
        """Every client piece's state, in registration order (collective where a piece's ``state_dict`` is)."""
        return {key: save() for key, (save, _) in self.client.items()}

    def rank_state(self) -> dict[str, Any]:
        return {key: save() for key, (save, _) in self.per_rank.items()}

    def load_client(self, client: dict[str, Any]) -> list[str]:
        """Restore every registered client piece from ``client`` (already migrated); returns the registered keys it
        lacks (recorded values aside), whose pieces stay as constructed."""
        return _load(self.client, client)

    def load_rank(self, state: dict[str, Any]) -> list[str]:
        return _load(self.per_rank, state)


def _load(entries: dict, state: dict[str, Any]) -> list[str]:
    missing = []
    for key, (_, load) in entries.items():
        if load is None:
            continue
        if key in state:
            load(state[key])
        else:
            missing.append(key)
    return missing
