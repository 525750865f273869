"""Weights one ulp apart: exact moves, exact restores, and the yardstick the parity check takes from them."""

import pytest
import torch

from forge_service.e2e import StartState, one_ulp_departure, parity_tolerance, rounding_noise
from forge_service.ulp import flip_last_bit, one_ulp_apart

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def _specials(dtype: torch.dtype) -> torch.Tensor:
    info = torch.finfo(dtype)
    values = [0.0, -0.0, 1.0, -3.5, info.max, -info.max, info.tiny, info.eps, float("inf"), float("-inf"),
              float("nan")]
    return torch.cat([torch.tensor(values, dtype=dtype), torch.randn(1000, dtype=torch.float64).to(dtype)])


BITS = {2: torch.int16, 4: torch.int32, 8: torch.int64}


@pytest.mark.parametrize("dtype", DTYPES)
def test_each_finite_value_moves_one_ulp_and_flipping_again_restores_it_bit_for_bit(dtype: torch.dtype) -> None:
    original = _specials(dtype)
    moved = original.clone()
    flip_last_bit(moved)
    finite = torch.isfinite(original)
    assert torch.isfinite(moved).equal(finite)  # max stays finite, inf stays inf
    assert moved[~finite].view(BITS[dtype.itemsize]).equal(original[~finite].view(BITS[dtype.itemsize]))
    assert (moved[finite] != original[finite]).all()  # every finite value moved (zero to the smallest subnormal)
    # one step of the encoding: the move is at most one ulp of the value, and nothing lies between
    gap = (moved[finite].double() - original[finite].double()).abs()
    ulp = torch.finfo(dtype).eps * original[finite].double().abs().clamp_min(torch.finfo(dtype).tiny)
    assert (gap <= ulp).all()
    flip_last_bit(moved)
    assert moved.view(BITS[dtype.itemsize]).equal(original.view(BITS[dtype.itemsize]))


def test_a_models_weights_are_moved_while_the_block_runs_and_restored_exactly() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
    model[1].weight = model[0].weight  # tied: moved once, not moved and moved back
    before = [p.detach().clone() for p in model.parameters()]
    with one_ulp_apart(p.detach() for p in model.parameters()):
        assert all((p != b).all() for p, b in zip(model.parameters(), before, strict=True))
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))


def test_the_inputs_move_in_the_call_only_and_integers_stay() -> None:
    class Recording(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[tuple[torch.Tensor, torch.Tensor]] = []

        def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
            self.seen.append((x.clone(), ids.clone()))
            return x * ids

    model, x, ids = Recording(), torch.randn(4), torch.arange(4)
    start = StartState(model, ((x, ids), {}))
    start.call_one_ulp_apart(model)
    start.call(model)
    (moved_x, moved_ids), (again_x, _) = model.seen
    assert (moved_x != x).all() and torch.equal(moved_ids, ids)
    assert torch.equal(again_x, x)  # the first call's inputs are kept as they were


class _Chaotic(torch.nn.Module):
    """A deep bf16 stack with random weights: rounding noise grows through it."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(64, 64).to(torch.bfloat16) for _ in range(24))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.nn.functional.layer_norm(torch.tanh(layer(x)) * 4.0 + x, (64,))
        return x


def test_a_chaotic_low_precision_model_gets_a_wider_tolerance_and_a_calm_one_does_not() -> None:
    chaotic, x = _Chaotic(), torch.randn(16, 64, dtype=torch.bfloat16)
    start = StartState(chaotic, ((x,), {}))
    reference = start.call(chaotic)
    noise = one_ulp_departure(chaotic, start, reference)
    assert noise is not None and noise > 2e-2  # eager alone moves past the dtype's tolerance
    assert parity_tolerance(reference, rounding_noise(None, noise)) > 2e-2
    assert torch.equal(start.call(chaotic), reference)  # the weights came back exactly

    calm = torch.nn.Linear(64, 64)
    start = StartState(calm, ((torch.randn(16, 64),), {}))
    reference = start.call(calm)
    noise = one_ulp_departure(calm, start, reference)
    assert noise is not None and noise < 1e-6
    assert parity_tolerance(reference, rounding_noise(None, noise)) == 1e-3


def test_the_noise_is_the_larger_known_departure() -> None:
    assert rounding_noise(None, None) is None
    assert rounding_noise(0.6, 0.1) == 0.6 and rounding_noise(None, 0.1) == 0.1 and rounding_noise(0.05, None) == 0.05
    assert rounding_noise(float("inf"), 0.1) == 0.1


def test_a_model_that_cannot_run_one_ulp_apart_gives_no_yardstick() -> None:
    class Picky(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if not torch.equal(x, torch.ones(2)):
                raise ValueError("only ones")
            return x * 2

    model = Picky()
    start = StartState(model, ((torch.ones(2),), {}))
    assert one_ulp_departure(model, start, start.call(model)) is None
