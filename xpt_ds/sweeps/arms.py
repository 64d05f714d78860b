"""A sweep's arms as its report shows them: their order, display names and plot colours, and which arm is the
Scratch baseline of the data-efficiency ratio. An arm is a method (``xpt``) or a label of a method
(``--methods xpt_mean=xpt``: the rows' ``method`` is the label, ``base_method`` the method)."""
from __future__ import annotations

from xpt_ds.config.methods import BASELINE, METHODS

# Display names in the registry's order (002's table order, then 000's variants).
METHOD_NAMES = {name: m.display for name, m in METHODS.items()}


def ordered(rows: list[dict]) -> list[str]:
    """The arms in a fixed order: by method (``METHOD_NAMES``' order), an arm named after its method before the
    labelled ones of that method (``--methods xpt_focus=xpt``), labels alphabetically."""
    order = list(METHOD_NAMES)
    base = {r["method"]: r.get("base_method", r["method"]) for r in rows}
    return sorted(base, key=lambda m: (order.index(base[m]) if base[m] in order else len(order), m != base[m], m))


def display_name(method: str) -> str:
    return METHOD_NAMES.get(method, method)


def color(method: str, rows: list[dict]) -> str:
    """The same colour for a method in every plot (matplotlib's default cycle of 10, then Dark2's); the labelled arms
    take those of another palette (tab20b), in ``ordered``' order."""
    import matplotlib
    from matplotlib.colors import to_hex
    if method in METHOD_NAMES:
        index = list(METHOD_NAMES).index(method)
        return f"C{index}" if index < 10 else to_hex(matplotlib.colormaps["Dark2"].colors[index - 10])
    palette = matplotlib.colormaps["tab20b"].colors
    labelled = [m for m in ordered(rows) if m not in METHOD_NAMES]
    return to_hex(palette[labelled.index(method) % len(palette)])


def baseline_arm(rows: list[dict]) -> str | None:
    """The arm whose runs are the Scratch curve: the one named ``scratch``, else the one arm of method Scratch
    under a label of its own (``--methods scratch_lr=scratch``); None with no such arm, or several labelled
    ones and no plain one (which of them would be the baseline?)."""
    arms = {r["method"] for r in rows if r.get("base_method", r["method"]) == BASELINE}
    if BASELINE in arms:
        return BASELINE
    return arms.pop() if len(arms) == 1 else None
