"""xpt_ds.checkpoint.frozen.holds_exactly: whether a bf16 engine's own copy of a frozen weight is its exact fp32
value (then nothing more is kept beside the engine) reads fp32's lower 16 bits instead of a round trip through bf16;
it has to give the round trip's answer on every kind of value."""
import pytest
import torch

from xpt_ds.checkpoint.frozen import holds_exactly


def _round_trip(dtype, value):
    return torch.equal(value.to(dtype).float(), value)


@pytest.mark.parametrize("case", ["bf16 values", "fp32 values", "one ulp off", "specials", "subnormals",
                                  "transposed", "empty"])
def test_the_bit_test_agrees_with_the_round_trip(case):
    g = torch.Generator().manual_seed(0)
    bf16 = torch.empty(4099).normal_(0, 0.02, generator=g).to(torch.bfloat16).float()
    value = {"bf16 values": bf16,
             "fp32 values": torch.empty(4099).normal_(0, 0.02, generator=g),
             "one ulp off": torch.cat([bf16[:-1], torch.nextafter(bf16[-1:], torch.tensor([1.0]))]),
             "specials": torch.tensor([0.0, -0.0, float("inf"), -float("inf"), 1.0, -2.5, 2.0 ** 127, 3.0e38]),
             "subnormals": torch.tensor([1e-40, -3e-39, 2.0 ** -133]).to(torch.bfloat16).float(),
             "transposed": bf16[:4096].view(64, 64).t(),
             "empty": torch.empty(0)}[case]
    for dtype in (torch.bfloat16, torch.float16):
        assert holds_exactly(dtype, value) == _round_trip(dtype, value), (case, dtype)
    assert holds_exactly(torch.bfloat16, value) == (case not in ("fp32 values", "one ulp off", "specials"))
    if case == "specials":
        assert holds_exactly(torch.bfloat16, value[:-1])  # only 3e38 is no bf16 number
