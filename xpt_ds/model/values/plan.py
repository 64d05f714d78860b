"""Where each parameter of the target gets its value: a ``Recipe`` per parameter, and ``PlanValues``, which
produces any parameter's float32 value on demand, one at a time.

A recipe says: copy the source's tensor KEY (``source``; ``shift`` moves RoBERTa's position rows when the pad
ids differ), draw it as the stock class would from the parameter's own generator (``init``,
``xpt_ds.model.values.stock_init``), or take the rows ``model.embedding_init`` made (``rows``: ``input``, or an untied
head's ``output``). The family builders (``xpt_ds.model.build`` for encoders, ``xpt_ds.model.decoder``) state
which target parameters come from which source prefix (``CopyRule``); ``recipes_for`` applies the rules. Whoever
fills the model (the trainer's engine, ``xpt_ds.model.skeleton.assign``) asks ``PlanValues`` for each value when
it fills that parameter, so that no value is computed before it is needed nor kept after.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from xpt_ds.model.values.stock_init import StockInit


@dataclass(frozen=True)
class Recipe:
    kind: str  # "source" | "init" | "rows"
    key: str = ""  # source: the source model's parameter name; rows: "input" or "output"
    shift: int = 0  # source: target row r is the source's row r - shift; rows outside it are drawn (init)
    rows: int = 0  # source: only its first ``rows`` rows (method extend's old rows; 0: all of it)


@dataclass(frozen=True)
class CopyRule:
    """Target parameters named ``target + REST`` are the source's ``source + REST`` (REST passed through
    ``rename``: LoRA's ``base_layer``), if the source has it; ``tagged``: they count as the source's (@source)."""
    target: str
    source: str
    tagged: bool = True


def recipes_for(names: list[str], rules: list[CopyRule], source_names: set[str], rows: dict[str, str],
                shifts: dict[str, int] | None = None, rename: Callable[[str], str] = lambda n: n
                ) -> tuple[dict[str, Recipe], set[str]]:
    """(name -> recipe for every target parameter, the names copied from the source that count as its): ``rows``
    first (target name -> 'input'/'output'), then the first rule whose prefix matches and whose source tensor
    exists, else drawn."""
    recipes, copied = {}, set()
    for name in names:
        if name in rows:
            recipes[name] = Recipe("rows", rows[name])
            continue
        for rule in rules:
            if not name.startswith(rule.target):
                continue
            src = rename(rule.source + name[len(rule.target):])
            if src in source_names:
                recipes[name] = Recipe("source", src, (shifts or {}).get(name, 0))
                if rule.tagged:
                    copied.add(name)
                break
        else:
            recipes[name] = Recipe("init")
    return recipes, copied


@dataclass
class PlanValues:
    """``values(name)``: the float32 value (CPU) of target parameter ``name`` by its recipe. ``source`` reads the
    source's tensors (``xpt_ds.model.values.source_files``), ``init`` draws new ones, ``rows`` holds
    model.embedding_init's matrices until ``close``. Calling it again for a name gives the same bits."""
    recipes: dict[str, Recipe]
    source: object | None
    init: StockInit
    rows: dict[str, torch.Tensor] = field(default_factory=dict)

    def __call__(self, name: str) -> torch.Tensor:
        recipe = self.recipes[name]
        if recipe.kind == "rows":
            return self.rows[recipe.key].clone()
        if recipe.kind == "init":
            return self.init.value(name)
        value = self.source.get(recipe.key)
        if recipe.rows:
            return value[:recipe.rows].clone()
        if recipe.shift:
            drawn = self.init.value(name)
            lo, hi = max(0, recipe.shift), min(drawn.shape[0], value.shape[0] + recipe.shift)
            drawn[lo:hi] = value[lo - recipe.shift:hi - recipe.shift]
            return drawn
        return value

    def close(self) -> None:
        self.rows.clear()
        if self.source is not None:
            self.source.close()
