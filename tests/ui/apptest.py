"""Opening one page of the dashboard in Streamlit's AppTest."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
from streamlit.testing.v1 import AppTest

import ui

APP = Path(ui.__file__).with_name("app.py")
TIMEOUT_S = 60


def open_page(page: str, **query: str) -> AppTest:
    """Run the app, switch to ``pages/<page>.py`` with ``query`` in the URL; fail on any exception."""
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT_S)
    at.query_params.update(query)
    at.run()
    at.switch_page(f"pages/{page}.py").run()
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
