"""A module's side of its variant key, read again only after the module has changed.

A module card's key includes the module's public plain attributes and its parameters and
buffers (:func:`packager.variant.module_call_kwargs`). Reading them on every call costs more
than the kernel of a small card, so the guard keeps what it read together with a snapshot of
the module tree's slots (instance attributes, parameters, buffers, submodules) and reads again
only when a slot no longer holds the very same object. The snapshot keeps strong references
(until the guard is uninstalled and forgets it), so no identity it compares can be reused by
another object; lists, which can change in place, are compared by value. The tensors themselves
are still checked on every call by the matcher (``param.data = ...`` changes a tensor without
replacing it).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import NamedTuple

import torch

from packager.variant import ATTRIBUTES_KWARG, STATE_KWARG, is_plain_attribute, module_call_kwargs


class _Reading(NamedTuple):
    slots: list[object]
    lists: list[tuple[int, list[object]]]
    attributes: object
    state: object


def module_slots(module: torch.nn.Module) -> list[object]:
    """Every object the module tree's instance attributes, parameters, buffers and submodules hold."""
    slots: list[object] = []
    pending = [module]
    while pending:
        current = vars(pending.pop())
        slots.extend(current.values())
        for table in ("_parameters", "_buffers", "_modules"):
            slots.extend(current.get(table, {}).values())
        pending.extend(m for m in current.get("_modules", {}).values() if m is not None)
    return slots


def _plain_lists(slots: list[object]) -> list[tuple[int, list[object]]]:
    return [(i, list(v)) for i, v in enumerate(slots) if type(v) is list and is_plain_attribute(v)]


def _unchanged(slots: list[object], reading: _Reading) -> bool:
    return (
        len(slots) == len(reading.slots)
        and all(map(operator.is_, slots, reading.slots))
        and all(slots[i] == copy for i, copy in reading.lists)
    )


class ModuleKeyReader:
    """The keyword arguments a module call's variant key sees, for one module instance.

    While the module is unchanged, the attribute and state lists returned are the same objects
    from call to call, so a matcher may remember its verdict on them (see
    :class:`packager.guard.CallMatcher`'s ``remembered``). Safe to share between threads: a new
    reading replaces the old one in a single assignment.
    """

    def __init__(self) -> None:
        self._reading: _Reading | None = None

    def call_kwargs(self, module: torch.nn.Module, kwargs: Mapping[str, object]) -> dict[str, object]:
        slots = module_slots(module)
        reading = self._reading
        if reading is None or not _unchanged(slots, reading):
            keyed = module_call_kwargs(module, {})
            reading = _Reading(slots, _plain_lists(slots), keyed[ATTRIBUTES_KWARG], keyed[STATE_KWARG])
            self._reading = reading
        return {**kwargs, ATTRIBUTES_KWARG: reading.attributes, STATE_KWARG: reading.state}

    def forget(self) -> None:
        """Drop the reading, and with it the references it holds to the module tree's slots."""
        self._reading = None
