"""What a row of benchmarks/bench_throughput.py really ran, read from the model and the DeepSpeed engine."""
from __future__ import annotations


def frozen_matmul(model, trainable: set[str]) -> int:
    """Frozen weights of the encoder layers: their backward computes input gradients but no weight gradients."""
    return sum(p.numel() for n, p in model.named_parameters()
               if p.ndim == 2 and ".encoder.layer." in n and n not in trainable)


def optimizer_state_gib(engine) -> float:
    """Bytes the optimizer holds: its state tensors (Adam's two moments) and the fp32 master partitions it steps."""
    import torch

    base = getattr(engine.optimizer, "optimizer", engine.optimizer)
    size = sum(t.numel() * t.element_size() for st in base.state.values() for t in st.values() if torch.is_tensor(t))
    size += sum(p.numel() * p.element_size() for g in base.param_groups for p in g["params"])
    return size / 2 ** 30


def engine_facts(engine) -> dict:
    """What actually ran, so a row cannot silently be something else (say, HF without DeepSpeed, or a variant
    whose engine settings DeepSpeed did not take): read from the engine and its ZeRO optimizer, not the JSON."""
    zero = engine.optimizer
    return {"class": type(engine).__name__, "zero_stage": engine.zero_optimization_stage(),
            "module_dtype": str(next(engine.module.parameters()).dtype).replace("torch.", ""),
            "bf16": engine.bfloat16_enabled(), "torch_autocast": engine.torch_autocast_enabled(),
            "gradient_clipping": engine.gradient_clipping(), "optimizer": type(zero).__name__,
            "tput_timer_syncs": engine.tput_timer.config.enabled and engine.tput_timer.config.synchronized,
            "base_optimizer": type(getattr(zero, "optimizer", zero)).__name__,
            # hooks: one per trainable tensor where DeepSpeed handles each gradient as backward produces it
            "grad_hooks": len(getattr(zero, "_grad_acc_hooks", [])),
            **{k: getattr(zero, k, None) for k in ("overlap_comm", "contiguous_gradients", "check_grad_overflow",
                                                    "compute_grad_norm")}}


class LinearOutputDtype:
    """The dtype of the first ``nn.Linear``'s output in the next forward: bf16 under a bf16 module or under
    DeepSpeed's torch_autocast, so a row shows its matmuls really ran in the precision its engine JSON asks for."""

    def __init__(self, model):
        import torch

        self.dtype = None
        linear = next(m for m in model.modules() if isinstance(m, torch.nn.Linear))
        self._hook = linear.register_forward_hook(self._record)

    def _record(self, module, inputs, output) -> None:
        self.dtype = str(output.dtype).replace("torch.", "")
        self._hook.remove()
