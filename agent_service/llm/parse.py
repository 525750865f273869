"""Reading a model's answer: exactly one fenced source block, plus a one-line description."""

from __future__ import annotations

import re
from dataclasses import dataclass

FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+.\-]*)[ \t]*\r?\n(.*?)```", re.DOTALL)
DESCRIPTION = re.compile(r"^\s*(?:\*\*)?description(?:\*\*)?\s*:\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
FORBIDDEN_INCLUDES = re.compile(r"#\s*include\s*[<\"](torch/|ATen/|c10/|cublas|cudnn|cutlass)", re.IGNORECASE)


class AnswerFormatError(ValueError):
    """The answer cannot be used as a candidate; the message says what to fix."""


@dataclass(frozen=True)
class ParsedAnswer:
    source: str
    description: str


def parse_answer(text: str) -> ParsedAnswer:
    """The single source block of ``text`` and its description, or AnswerFormatError."""
    blocks = FENCE.findall(text)
    if not blocks:
        raise AnswerFormatError("the answer has no fenced code block; put the whole source file in one ``` block")
    if len(blocks) > 1:
        raise AnswerFormatError(
            f"the answer has {len(blocks)} fenced code blocks; it must have exactly one, holding the whole source file"
        )
    source = blocks[0][1].strip() + "\n"
    if "kf_launch" not in source:
        raise AnswerFormatError('the source does not define kf_launch (extern "C" int kf_launch(...))')
    if "kf_abi.h" not in source:
        raise AnswerFormatError('the source does not #include "kf_abi.h"')
    forbidden = FORBIDDEN_INCLUDES.search(source)
    if forbidden:
        raise AnswerFormatError(f"the source includes {forbidden.group(1)}...: write the kernel yourself, "
                                "without torch headers or vendor libraries")
    match = DESCRIPTION.search(FENCE.sub("", text))
    if match:
        description = match.group(1)
    else:
        prose = [line.strip() for line in FENCE.sub("", text).splitlines() if line.strip()]
        description = prose[0] if prose else "kernel written by the model"
    return ParsedAnswer(source=source, description=description.strip("*# ")[:200])
