"""Studies that use xpt-ds: each subpackage is one study's decisions (verdicts, reports, pilot rules, session
packing), importable and tested, beside the library and never imported by it (``tests/test_layers.py``).

Not installed with the package (setup.cfg packages ``xpt_ds``, ``data_tools`` and ``ds_configs`` only): run from a
checkout's root, ``python -m experiments.uagec.claims --out OUT``.
"""
