"""Knob spaces and how a revision moves through one.

A template family exposes, per card, the values each knob may take (the first is the sensible
default). The root proposal is the default; a revision changes one knob of its parent (two when
every single change was tried), never repeating a knob set already evaluated, so the tree search
explores a real space. A knob that only some modes read is held at its default under the others,
so two knob sets that render the same kernel count as one. A mode not tried yet (the structural
knob ``mode``: how the work maps onto threads and blocks) comes before other changes, since a
mode moves a kernel by factors and a fine knob by percents. Choices are deterministic given
(parent knobs, tried sets, seed).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

Knobs = dict[str, Any]
STRUCTURAL_KNOB = "mode"


def knob_key(knobs: Knobs) -> str:
    """Canonical text of a knob set, for comparing sets."""
    return json.dumps(knobs, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class KnobSpace:
    """Each knob's allowed values; the first value of each is the default.

    ``only_in`` names, for a knob that not every mode reads, the modes that do; under any other
    mode the knob keeps its default and is never varied (a space without modes reads every knob).
    """

    choices: dict[str, tuple[Any, ...]]
    only_in: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def default(self) -> Knobs:
        return {name: values[0] for name, values in self.choices.items()}

    def normalise(self, knobs: Knobs) -> Knobs:
        """``knobs`` restricted to this space, unknown, invalid or unread values replaced by defaults."""
        valid = {
            name: knobs[name] if name in knobs and knobs[name] in values else values[0]
            for name, values in self.choices.items()
        }
        return {name: value if self._reads(valid, name) else self.choices[name][0] for name, value in valid.items()}

    def _reads(self, knobs: Knobs, name: str) -> bool:
        """Whether the kernel of ``knobs`` depends on knob ``name``."""
        modes = self.only_in.get(name)
        return modes is None or STRUCTURAL_KNOB not in self.choices or knobs.get(STRUCTURAL_KNOB) in modes

    def size(self) -> int:
        n = 1
        for values in self.choices.values():
            n *= len(values)
        return n

    def neighbours(self, knobs: Knobs, changes: int) -> Iterator[Knobs]:
        """Every distinct knob set that differs from ``knobs`` in exactly ``changes`` knobs it reads."""
        names = [n for n, v in self.choices.items() if len(v) > 1]
        seen = {knob_key(knobs)}
        for subset in itertools.combinations(names, changes):
            alternatives = [[v for v in self.choices[n] if v != knobs[n]] for n in subset]
            for values in itertools.product(*alternatives):
                changed = {**knobs, **dict(zip(subset, values, strict=True))}
                if not all(self._reads(changed, n) for n in subset):
                    continue
                neighbour = self.normalise(changed)
                if knob_key(neighbour) not in seen:
                    seen.add(knob_key(neighbour))
                    yield neighbour


def _rng(seed: int, knobs: Knobs | None) -> random.Random:
    digest = hashlib.sha256(f"{seed}:{knob_key(knobs or {})}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "little"))


def next_knobs(space: KnobSpace, parent: Knobs | None, tried: Iterable[Knobs], seed: int) -> Knobs | None:
    """The next knob set to try, or None when the space is exhausted."""
    tried_sets = [space.normalise(t) for t in tried]
    seen = {knob_key(t) for t in tried_sets}
    start = space.normalise(parent) if parent is not None else space.default()
    if parent is None and knob_key(start) not in seen:
        return start
    seen.add(knob_key(start))
    rng = _rng(seed, start)
    for changes in (1, 2):
        candidates = [k for k in space.neighbours(start, changes) if knob_key(k) not in seen]
        if changes == 1 and STRUCTURAL_KNOB in start:  # a mode not tried at all yet comes first
            modes_tried = {t[STRUCTURAL_KNOB] for t in tried_sets} | {start[STRUCTURAL_KNOB]}
            candidates = [k for k in candidates if k[STRUCTURAL_KNOB] not in modes_tried] or candidates
        if candidates:
            return candidates[rng.randrange(len(candidates))]
    if space.size() <= 4096:
        every = (space.normalise(dict(zip(space.choices, values, strict=True)))
                 for values in itertools.product(*space.choices.values()))
        rest = list({knob_key(k): k for k in every if knob_key(k) not in seen}.values())
        return rest[rng.randrange(len(rest))] if rest else None
    for _ in range(4096):
        candidate = space.normalise({name: rng.choice(values) for name, values in space.choices.items()})
        if knob_key(candidate) not in seen:
            return candidate
    return None


def describe_change(parent: Knobs | None, child: Knobs) -> str:
    """``"threads 128→256, vec 4→8"``, or the full set for a root."""
    if parent is None:
        return ", ".join(f"{k}={v}" for k, v in child.items())
    changed = [f"{k} {parent.get(k)}→{v}" for k, v in child.items() if parent.get(k) != v]
    return ", ".join(changed) if changed else "same knobs"
