"""Opening one page of the dashboard in Streamlit's AppTest."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pyarrow as pa
from google.protobuf.message import Message
from streamlit.testing.v1 import AppTest

import ui

APP = Path(ui.__file__).with_name("app.py")
TIMEOUT_S = 60
# Widget and form ids: in the page's messages, never shown.
HIDDEN_FIELDS = {"id", "form_id"}


def open_page(page: str, **query: str) -> AppTest:
    """Run the app, switch to ``screens/<page>.py`` with ``query`` in the URL; fail on any exception."""
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT_S)
    at.query_params.update(query)
    at.run()
    at.switch_page(f"screens/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def texts(elements: object) -> list[str]:
    return [str(e.value) for e in elements]  # type: ignore[attr-defined]


def code_texts(at: AppTest) -> list[str]:
    """The text of every code block, exactly as given to ``st.code``."""
    return [c.proto.code_text for c in at.code]


def chart_data(at: AppTest, index: int = 0) -> pd.DataFrame:
    """The data a Vega-Lite chart on the page was given."""
    proto = at.get("vega_lite_chart")[index].proto
    (dataset,) = proto.datasets
    return pa.ipc.open_stream(dataset.data.data).read_pandas()


def _strings(message: Message) -> list[str]:
    found: list[str] = []
    for field, value in message.ListFields():
        if field.name in HIDDEN_FIELDS:
            continue
        for item in value if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) else [value]:
            if isinstance(item, Message):
                found += _strings(item)
            elif isinstance(item, str):
                found.append(item)
    return found


def page_text(at: AppTest) -> list[str]:
    """What the page shows as text: every string its elements carry (labels, values, help, markdown,
    code, chart specs) and every table cell, an absent one as the table shows it."""
    found: list[str] = []
    for node in at._tree:
        proto = getattr(node, "proto", None)
        if isinstance(proto, Message):
            found += _strings(proto)
        if node.type == "arrow_data_frame":
            absent = proto.placeholder if proto.HasField("placeholder") else "None"  # Streamlit's default
            frame = node.value
            found += [absent if pd.isna(cell) else str(cell) for column in frame.columns for cell in frame[column]]
    return found
