"""xpt_ds.model.finite: the sums-first finiteness checks agree with ``isfinite`` value by value, including where
a sum is not finite although every value is (overflow), and where opposite infinities sum to NaN; and the save's
check built on them (``xpt_ds.training.guards.weights_finite``) gives every rank the same answer."""
import pytest
import torch

from xpt_ds.model.finite import all_finite, count_nonfinite, suspects

BIG = 3.0e38  # two of them overflow fp32's (and bf16's) largest finite value, 3.4e38


def _cases():
    g = torch.Generator().manual_seed(0)
    plain = torch.randn(1000, generator=g)
    with_value = lambda v: torch.cat([plain, torch.tensor([v])])  # noqa: E731
    return {
        "finite": plain,
        "nan": with_value(float("nan")),
        "inf": with_value(float("inf")),
        "-inf": with_value(float("-inf")),
        "inf and -inf": torch.cat([with_value(float("inf")), torch.tensor([float("-inf")])]),
        "finite, sum overflows": torch.tensor([BIG, BIG, 1.0]),
        "finite, sum overflows negative": torch.tensor([-BIG, -BIG]),
        "overflow and nan": torch.tensor([BIG, BIG, float("nan")]),
        "empty": torch.zeros(0),
        "2-d transposed": torch.randn(30, 40, generator=g).t(),
    }


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_all_finite_is_isfinite_all(dtype):
    for name, t in _cases().items():
        t = t.to(dtype)  # fp16: BIG becomes inf, which is what isfinite then says too
        assert all_finite(t) == bool(torch.isfinite(t).all()), (name, dtype)
    assert all_finite(torch.arange(5))  # an integer tensor holds only finite values


def test_suspects_flag_every_non_finite_tensor_and_the_count_is_exact():
    cases = [*_cases().values(), torch.arange(3)]  # an integer tensor too: flagged 0, in its place
    flags = suspects(cases, torch.device("cpu"))
    truth = [int(not torch.isfinite(t).all()) for t in cases]
    assert flags.dtype == torch.int64 and flags.shape == (len(cases),)
    assert all(f >= t for f, t in zip(flags.tolist(), truth))  # no non-finite tensor passes
    assert flags.tolist() == [1 if t.is_floating_point() and (t.sum().isinf() or t.isnan().any() or t.isinf().any())
                              else 0 for t in cases]  # a suspect is a non-finite sum, overflow included
    assert count_nonfinite(cases, torch.device("cpu")).item() == sum(int((~torch.isfinite(t)).sum()) for t in cases)
    assert suspects([], torch.device("cpu")).shape == (0,)
    assert count_nonfinite([], torch.device("cpu")).item() == 0


def _weights_finite(rank: int, store: str, params: list, masters: list, out) -> None:
    import types

    import deepspeed
    import torch.distributed as dist

    from xpt_ds.training.guards import weights_finite
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        deepspeed.init_distributed("gloo")  # deepspeed.comm over the group just made
        module = torch.nn.Module()
        for i, p in enumerate(params):
            module.register_parameter(f"p{i}", torch.nn.Parameter(p, requires_grad=False))
        engine = types.SimpleNamespace(module=module)
        optimizer = types.SimpleNamespace(single_partition_of_fp32_groups=masters)
        out.put((rank, weights_finite(engine, optimizer, torch.device("cpu"))))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("case", ["finite", "finite, one rank's sum overflows", "nan in rank 1's master",
                                  "inf in rank 0's weight, rank 1's sum overflows"])
def test_every_rank_agrees_on_the_weights_whatever_their_sums_say(tmp_path, case):
    """``weights_finite`` at 2 ranks (forked, gloo): a finite sum on every rank is the answer at once; a rank whose
    sum is not finite sends every rank into the value-by-value count, which clears finite values that overflowed
    the sum and finds a non-finite one, on whichever rank it is."""
    import multiprocessing
    g = torch.Generator().manual_seed(1)
    ok = [torch.randn(50, generator=g), torch.randn(4, 6, generator=g).to(torch.bfloat16)]
    overflow = [torch.tensor([BIG, BIG])]
    nan, inf = torch.tensor([1.0, float("nan")]), torch.tensor([float("inf"), 0.0])
    ranks = {"finite": [(ok, []), (ok, [torch.randn(8, generator=g)])],
             "finite, one rank's sum overflows": [(ok + overflow, []), (ok, [])],
             "nan in rank 1's master": [(ok, []), (ok, [nan])],
             "inf in rank 0's weight, rank 1's sum overflows": [(ok + [inf], []), (ok, overflow)]}[case]
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_weights_finite, args=(r, str(tmp_path / "store"), *ranks[r], out)) for r in range(2)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    want = case in ("finite", "finite, one rank's sum overflows")
    assert results == {0: want, 1: want}, (case, results)
