"""The module guard's native front: repeated hits served from C++, everything else left to the Python guard."""

from pathlib import Path

import pytest
import torch

from packager import load_cast
from packager.format import build_cast
from packager.module_dispatch import ModuleOverride
from packager.native.module import native_module_guard
from tests.packager.conftest import MODEL, SmallNet, entry, module_card


def _override(cast, module: torch.nn.Module) -> ModuleOverride:
    return next(o for o in cast._modules.values() if o.belongs_to(module))


def _python_matches(override: ModuleOverride, monkeypatch) -> list[int]:
    """Records every call that reaches the Python guard's matcher."""
    seen: list[int] = []
    match = override._kernels.match

    def spy(args, kwargs):
        seen.append(len(args))
        return match(args, kwargs)

    monkeypatch.setattr(override._kernels, "match", spy)
    return seen


def test_the_extension_builds_here() -> None:
    assert native_module_guard() is not None


def test_repeated_hits_are_served_without_the_python_guard(net_cast, monkeypatch) -> None:
    net, x, block, _, cast = net_cast
    with torch.no_grad(), cast.applied_to(net):
        override = _override(cast, net.block1)
        seen = _python_matches(override, monkeypatch)
        outputs = [net.block1(x) for _ in range(3)]
        assert override.front is not None and override.front.armed == 1
    for got in outputs:
        torch.testing.assert_close(got, torch.relu(x) * net.block1.weight)
    assert seen == [1]  # the first call armed the front; the next two never reached Python
    assert cast.stats()[block.id] == {"calls": 3, "hits": 3, "fallbacks": {}}


def test_a_call_no_kernel_takes_is_turned_away_without_the_python_guard(net_cast, monkeypatch) -> None:
    net, x, block, _, cast = net_cast
    other, narrow = torch.randn(2, 8), torch.randn(4, 7)
    with torch.no_grad(), cast.applied_to(net):
        seen = _python_matches(_override(cast, net.block1), monkeypatch)
        torch.testing.assert_close(net.block1(other), torch.relu(other) * net.block1.weight)
        with pytest.raises(RuntimeError, match="size of tensor"):  # eager's own error, from the original forward
            net.block1(narrow)
        net.block1(x)
    assert seen == [1]
    assert cast.stats()[block.id] == {"calls": 3, "hits": 1, "fallbacks": {"shape": 2}}


def test_a_changed_module_goes_back_to_the_python_guard(net_cast, monkeypatch) -> None:
    net, x, block, _, cast = net_cast
    block1 = net.block1
    with torch.no_grad(), cast.applied_to(net):
        seen = _python_matches(_override(cast, block1), monkeypatch)
        block1(x)
        block1(x)
        block1.scale = 2.0  # another variant: the snapshot no longer holds
        block1(x)
        del block1.scale
        block1(x)  # the Python guard matches again and re-arms
        block1(x)
        block1.weight = torch.nn.Parameter(torch.ones(8, dtype=torch.float64))
        block1(x)
        block1.weight = torch.nn.Parameter(torch.full((8,), 3.0))
        torch.testing.assert_close(block1(x), torch.relu(x) * 3.0)
        torch.testing.assert_close(block1(x), torch.relu(x) * 3.0)
        block1.weight.data = torch.ones(16)[::2]  # the same Parameter, another stride: checked in C++
        torch.testing.assert_close(block1(x), torch.relu(x))
    assert seen == [1] * 6
    stats = cast.stats()[block.id]
    assert stats["hits"] == 6 and stats["fallbacks"] == {"args": 1, "dtype": 1, "stride": 1}


def test_a_list_changed_in_place_is_a_changed_module(net_cast, monkeypatch) -> None:
    net, x, _, _, cast = net_cast
    block1 = net.block1
    block1.__dict__["hooks"] = [object()]  # a list slot outside the card's key: compared item by item
    with torch.no_grad(), cast.applied_to(net):
        seen = _python_matches(_override(cast, block1), monkeypatch)
        block1(x)
        block1(x)
        block1.hooks.append(object())
        block1(x)
        block1(x)
    assert seen == [1, 1]


def test_other_calls_reach_the_python_guard(net_cast, monkeypatch) -> None:
    net, x, block, _, cast = net_cast
    with cast.applied_to(net):
        override = _override(cast, net.block1)
        seen = _python_matches(override, monkeypatch)
        with torch.no_grad():
            net.block1(x)
            net.block1(x=x)  # keywords: never the front's
            torch.testing.assert_close(net.block1(x.double()), torch.relu(x.double()) * net.block1.weight)
        net.block1(x).sum().backward()  # autograd records the original forward
        with torch.no_grad():
            net.block1(torch.Tensor._make_subclass(_Marked, x))  # a subclass: never a card's tensor
            net.block1(x)
    assert len(seen) == 5
    torch.testing.assert_close(net.block1.weight.grad, torch.relu(x).sum(0))
    stats = cast.stats()[block.id]
    assert stats["hits"] == 2 and stats["fallbacks"] == {"dtype": 1, "autograd": 1, "args": 2}


class _Marked(torch.Tensor):
    pass


def test_a_failing_kernel_is_left_to_the_python_guard(tmp_path: Path, artifacts) -> None:
    net = SmallNet().eval()
    x = torch.randn(4, 8)
    block = module_card(net.block1, x)
    build_cast(tmp_path / "f.cast", MODEL, [entry(block, "// fails", artifacts["failing"], eager_us=5000.0)], [])
    cast = load_cast(tmp_path / "f.cast")
    with torch.no_grad():
        want = net.block1(x)
        with cast.applied_to(net):
            got = [net.block1(x) for _ in range(2)]
            front = _override(cast, net.block1).front
            assert front is not None and front.armed == 0  # a failed launch arms nothing
    for g in got:
        torch.testing.assert_close(g, want)
    assert cast.stats()[block.id]["fallbacks"] == {"kernel_error": 2}


