"""The one typed config tree of a training run, and everything that reads it.

- ``job``: the dataclasses (``TrainConfig`` and its sections), each field with its default and help;
- ``manager``: defaults < YAML/JSON file < ``--section.key=value``, the config a checkpoint carries, ``--help``;
- ``validate`` and ``phase_checks``: the checks, each error one line naming the key;
- ``values``: one leaf value against its type;
- ``methods``: the method table (what each ``model.method`` builds, trains and exports);
- ``embedding_args``: the options of each ``model.embedding_init`` strategy;
- ``flags``: a dataclass's fields as command-line flags (fine-tuning, the sweep).

A leaf: nothing here imports a builder. The names below are what the rest of the package uses.
"""
from xpt_ds.config.job import (
                               DECAYS,
                               H100_PEAK_TFLOPS,
                               MASKING_KEYS,
                               MASKINGS,
                               OBJECTIVE_DATA,
                               OBJECTIVES,
                               ActivationsConfig,
                               CheckpointConfig,
                               ConfigError,
                               DataConfig,
                               GuardConfig,
                               LoggingConfig,
                               LoraConfig,
                               MergeConfig,
                               MixConfig,
                               ModelConfig,
                               OptimConfig,
                               PhaseConfig,
                               ProfileConfig,
                               TrainConfig,
                               doc,
)
from xpt_ds.config.manager import (
                               from_dict,
                               help_text,
                               load_config,
                               read_checkpoint_config,
                               read_config_file,
                               save_config,
                               to_dict,
)
from xpt_ds.config.validate import validate
from xpt_ds.config.values import Override, coerce

__all__ = ["DECAYS", "H100_PEAK_TFLOPS", "MASKING_KEYS", "MASKINGS", "OBJECTIVE_DATA", "OBJECTIVES",
           "ActivationsConfig", "CheckpointConfig", "ConfigError", "DataConfig", "GuardConfig", "LoggingConfig",
           "LoraConfig", "MergeConfig", "MixConfig", "ModelConfig", "OptimConfig", "Override", "PhaseConfig",
           "ProfileConfig", "TrainConfig", "coerce", "doc", "from_dict", "help_text",
           "load_config", "read_checkpoint_config", "read_config_file", "save_config", "to_dict", "validate"]
