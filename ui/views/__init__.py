"""Rendering of each page from plain data (``ui.models``); fetching stays in the pages."""
