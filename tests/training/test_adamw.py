"""optim.torch_adam's optimizer (xpt_ds.training.adamw): torch's AdamW stepped a slice at a time, for temporaries
of one slice instead of two of a ZeRO flat partition's whole size; the same values and state, bit for bit."""
import pytest
import torch

from xpt_ds.training.adamw import ChunkedAdamW


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("chunk", [1000, 4096])
def test_slices_step_as_the_whole_tensor_does_bit_for_bit(threads, chunk):
    """Slices that are no multiple of a vector's width, on 1 and 2 threads (other tails in each kernel), a
    tensor larger than a slice and one smaller, two param groups (weight decay and none), a changing lr."""
    torch.set_num_threads(threads)
    try:
        g = torch.Generator().manual_seed(chunk)
        shapes = [(301, 97), (37,)]  # 29,197 elements: several slices and a tail; and one slice
        start = [torch.randn(s, generator=g) for s in shapes]
        grads = [[torch.randn(s, generator=g) * 10.0 ** -k for s in shapes] for k in range(4)]
        runs = []
        for cls in (torch.optim.AdamW, ChunkedAdamW):
            params = [torch.nn.Parameter(t.clone()) for t in start]
            opt = cls([{"params": params[:1], "weight_decay": 0.1}, {"params": params[1:], "weight_decay": 0.0}],
                      lr=1e-3, betas=(0.9, 0.98), eps=1e-6, foreach=False)
            opt.chunk = chunk
            for k, step_grads in enumerate(grads):
                for p, grad in zip(params, step_grads):
                    p.grad = grad.clone()
                for group in opt.param_groups:
                    group["lr"] = 1e-3 * (k + 1)
                opt.step()
            runs.append((params, opt))
        (want, want_opt), (got, got_opt) = runs
        assert all(torch.equal(a, b) for a, b in zip(want, got))
        for a, b in zip(want, got):
            sa, sb = want_opt.state[a], got_opt.state[b]
            assert sorted(sa) == sorted(sb) == ["exp_avg", "exp_avg_sq", "step"]
            assert all(torch.equal(sa[k], sb[k]) for k in sa) and float(sb["step"]) == 4.0
        assert got_opt.state_dict()["param_groups"] == want_opt.state_dict()["param_groups"]
    finally:
        torch.set_num_threads(1)
