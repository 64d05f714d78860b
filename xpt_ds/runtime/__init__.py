"""Processes and the cluster: ``distributed`` (process group start, lost peers), ``ports``, ``run_lock`` (one job
per run directory, one config per job), ``rank_say`` (one line per machine), ``preemption`` (signals ->
a checkpoint and exit 124), ``status`` (RUN_DIR/status.json and its heartbeat), ``collector`` (the garbage
collector around imports and builds), ``op_builds`` (DeepSpeed's JIT-built ops), ``host_memory``, ``tether`` (a
child process that ends with the one that started it).
"""
