import pytest
import torch

from packager.module_state import ModuleKeyReader, module_slots
from packager.variant import ATTRIBUTES_KWARG, STATE_KWARG, module_call_kwargs, variant_key


class Block(torch.nn.Module):
    """A norm + activation block: attributes, a list attribute, parameters, a buffer, a submodule."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.GroupNorm(2, 4)
        self.dims = [1, 2]
        self.alpha = 0.5
        self.register_buffer("offset", torch.zeros(4))


def _changes() -> list:
    def set_alpha(b: Block) -> None:
        b.alpha = 0.25

    def mutate_list(b: Block) -> None:
        b.dims.append(3)

    def nested_eps(b: Block) -> None:
        b.norm.eps = 1e-3

    def replace_submodule(b: Block) -> None:
        b.norm = torch.nn.GroupNorm(1, 4)

    def replace_buffer(b: Block) -> None:
        b.offset = torch.zeros(4, dtype=torch.float64)

    def new_parameter(b: Block) -> None:
        b.scale = torch.nn.Parameter(torch.ones(4))

    def train(b: Block) -> None:
        b.norm.train()

    return [set_alpha, mutate_list, nested_eps, replace_submodule, replace_buffer, new_parameter, train]


@pytest.mark.parametrize("change", _changes(), ids=lambda f: f.__name__)
def test_a_reading_follows_every_change_to_the_module(change) -> None:
    block = Block().eval()
    reader = ModuleKeyReader()
    before = reader.call_kwargs(block, {"flag": True})
    assert before == {"flag": True, **module_call_kwargs(block, {})}
    change(block)
    after = reader.call_kwargs(block, {"flag": True})
    assert after == {"flag": True, **module_call_kwargs(block, {})}
    assert variant_key("Block", [], after) != variant_key("Block", [], before)


def test_an_unchanged_module_gives_back_the_same_objects() -> None:
    block = Block().eval()
    reader = ModuleKeyReader()
    first, second = reader.call_kwargs(block, {}), reader.call_kwargs(block, {"x": 1})
    assert first[ATTRIBUTES_KWARG] is second[ATTRIBUTES_KWARG]
    assert first[STATE_KWARG] is second[STATE_KWARG]
    assert second["x"] == 1


def test_slots_cover_the_whole_tree() -> None:
    block = Block()
    slots = module_slots(block)
    for tensor in [*block.parameters(), *block.buffers()]:
        assert any(s is tensor for s in slots)
    assert any(s is block.norm for s in slots)
