"""xpt_ds.runtime.op_builds: a TORCH_CUDA_ARCH_LIST that DeepSpeed's JIT build of FusedAdam cannot read is one
error line before the build, and the check agrees with DeepSpeed's own reading of the list."""
import pytest
import torch
from deepspeed.ops.op_builder.fused_adam import FusedAdamBuilder  # the CUDA one, whatever the accelerator

from xpt_ds.config import OptimConfig
from xpt_ds.errors import UserError
from xpt_ds.runtime.op_builds import arch_list_problem, check_arch_list, fused_adam_is_jit_built
from xpt_ds.training.engine import build_optimizer

VALUES = ["9.0", "9.0+PTX", "8.0 8.6 9.0", "7.5;8.0;9.0+PTX", " 9.0 ; 10.0 ", "12.0+PTX", "9.0a", "9.0a;10.0",
          "8.0 9.0 10.0a+PTX", "sm_90", "9.0;abc", "10.0f", "", ";"]


@pytest.mark.parametrize("value", VALUES)
def test_the_check_reads_the_arch_list_as_deepspeeds_jit_build_does(value, monkeypatch):
    """DeepSpeed's ``compute_capability_args`` in JIT mode (the path FusedAdam's first build takes) reads the
    list from the environment before it probes any device, so it runs here on the CPU. The check must reject
    exactly the values it fails on."""
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", value)  # DeepSpeed rewrites it (adds +PTX); monkeypatch restores
    probe = FusedAdamBuilder()
    probe.jit_mode = True
    try:
        probe.compute_capability_args()
        deepspeed_reads = True
    except (ValueError, IndexError):  # '9.0a' (int('0a')); ';' (an empty list it was given)
        deepspeed_reads = False
    except RuntimeError:  # no list: DeepSpeed asks the visible GPUs, and there are none here
        assert not value.strip()
        deepspeed_reads = True
    assert (arch_list_problem(value) is None) == deepspeed_reads, (value, arch_list_problem(value))


def test_an_unreadable_entry_is_one_line_naming_it_and_the_fix():
    with pytest.raises(UserError) as e:
        check_arch_list({"TORCH_CUDA_ARCH_LIST": "8.0 9.0a"})
    line = str(e.value)
    assert "\n" not in line and line.startswith("TORCH_CUDA_ARCH_LIST='8.0 9.0a': DeepSpeed cannot build FusedAdam")
    assert "for '9.0a'" in line
    assert "set TORCH_CUDA_ARCH_LIST='8.0 9.0' (or unset it), or optim.torch_adam: true" in line
    with pytest.raises(UserError, match="for 'sm_90'.*the GPU's capability, e.g. TORCH_CUDA_ARCH_LIST=9.0"):
        check_arch_list({"TORCH_CUDA_ARCH_LIST": "sm_90"})
    with pytest.raises(UserError, match="^TORCH_CUDA_ARCH_LIST=';': it names no architecture"):
        check_arch_list({"TORCH_CUDA_ARCH_LIST": ";"})
    check_arch_list({"TORCH_CUDA_ARCH_LIST": "9.0+PTX"})
    check_arch_list({})


def test_the_cpus_fused_adam_builds_whatever_the_cuda_arch_list_says(monkeypatch):
    """On the CPU accelerator no CUDA kernel is JIT-built, so the list is not checked and FusedAdam still steps."""
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0a")
    assert not fused_adam_is_jit_built()
    model = torch.nn.Linear(4, 4)
    opt = build_optimizer(model, OptimConfig(), {})
    assert type(opt).__name__ == "FusedAdam"
    model(torch.ones(2, 4)).sum().backward()
    before = model.weight.detach().clone()
    for g in opt.param_groups:
        g["lr"] = 0.1
    opt.step()
    assert not torch.equal(before, model.weight)
