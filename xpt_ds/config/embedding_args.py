"""The options of each ``model.embedding_init`` strategy (``model.embedding_init_args``): names, defaults and
a line of help, checked here so that loading a config imports no strategy code (``xpt_ds.embedding_init``
implements them, one function per name)."""
from __future__ import annotations

from xpt_ds.config.job import ConfigError
from xpt_ds.config.values import coerce

# name -> (option -> default, where a default of "" means required; help)
EMBEDDING_INITS: dict[str, tuple[dict, str]] = {
    "random": ({}, "N(0, initializer_range) from the global generator (002 eq. 7)"),
    "source_mean": ({"full_covariance_max_dim": 2048}, "samples of N(mean, covariance) of the source rows"),
    "frequency_rank": ({}, "target piece of rank r gets source row of rank r (003)"),
    "overlap_copy": ({}, "pieces equal to a source token copy its row"),
    "focus": ({"static": ""}, "FOCUS: sparsemax over overlapping pieces' rows"),
    "aligned": ({"target": "", "source": "", "top_k": 10, "temperature": 0.1},
                "WECHSEL: softmax over the top-k most similar source tokens"),
    "from_file": ({"path": ""}, "rows of a .npy + sidecar"),
    "subword_mean": ({}, "EEVE/SambaLingo: mean of the source rows of the tokens the source cuts its text into"),
}


def check_args(name: str, args: dict) -> dict:
    """``args`` with defaults filled in and values of the defaults' types; unknown name or key, a missing
    required key or a wrong type is a ConfigError naming ``model.embedding_init_args.KEY``."""
    if name not in EMBEDDING_INITS:
        raise ConfigError(f"config key 'model.embedding_init' is '{name}'; valid: {', '.join(EMBEDDING_INITS)}")
    spec = EMBEDDING_INITS[name][0]
    out = dict(spec)
    for k, v in args.items():
        key = f"model.embedding_init_args.{k}"
        if k not in spec:
            raise ConfigError(f"unknown config key '{key}' for embedding_init '{name}' "
                              f"(valid: {', '.join(spec) or 'none'})")
        out[k] = coerce(v, type(spec[k]), key)
    missing = [k for k, v in out.items() if v == ""]
    if missing:
        raise ConfigError(f"config key 'model.embedding_init_args.{missing[0]}' is required by embedding_init "
                          f"'{name}'")
    return out


