"""The Kernel Forge dashboard: ``streamlit run ui/app.py`` (``kforge ui`` does it for you).

A client of the forge service only; ``KFORGE_UI_FORGE`` names it (default 127.0.0.1:50050).
"""

import streamlit as st

from ui import state

st.set_page_config(page_title="Kernel Forge", page_icon="🔥", layout="wide")
navigation = st.navigation([
    st.Page("pages/runs.py", title="Runs", icon="📋", default=True),
    st.Page("pages/run.py", title="Run", icon="📈"),
    st.Page("pages/card.py", title="Card", icon="🌳"),
    st.Page("pages/candidate.py", title="Candidate", icon="🧪"),
    st.Page("pages/providers.py", title="Providers", icon="⚖️"),
    st.Page("pages/package.py", title="Package", icon="📦"),
])
st.sidebar.caption(f"forge service: `{state.forge_address()}`")
navigation.run()
