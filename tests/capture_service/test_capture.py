"""capture_model runs the model in a real child process: errors and crashes come back named."""

import threading

import pytest

from capture_service.capture import LOG_FILE, capture_model
from capture_service.errors import CaptureCancelled, CaptureCrashed, InvalidCaptureOptions, InvalidModelSpec
from kforge_domain.card import CardSet


def test_capture_in_a_child_process_returns_the_written_cards(tiny_spec, tmp_path) -> None:
    stages: list[str] = []
    cards = capture_model(str(tiny_spec), out_dir=tmp_path, progress=lambda p: stages.append(p.stage))
    assert stages[0] == "loading" and stages[-1] == "done" and "timing" in stages
    assert cards == CardSet.load(tmp_path) and cards.grad_mode == "inference"
    assert any(c.op == "aten::layer_norm.default" for c in cards.cards)


def test_errors_in_the_child_come_back_as_their_class(write_spec, tmp_path) -> None:
    spec = write_spec("import torch\nimport not_a_real_module_kf\n", "broken_import.py")
    with pytest.raises(InvalidModelSpec, match="ModuleNotFoundError: No module named 'not_a_real_module_kf'"):
        capture_model(str(spec), out_dir=tmp_path)
    with pytest.raises(InvalidCaptureOptions):
        capture_model(str(spec), device="tpu", out_dir=tmp_path)


def test_a_crashing_model_does_not_take_the_caller_down(write_spec, tmp_path) -> None:
    spec = write_spec(
        """
        import os, signal, torch

        class Crash(torch.nn.Module):
            def forward(self, x):
                print("about to crash", flush=True)
                os.kill(os.getpid(), signal.SIGSEGV)

        def get_model():
            return Crash()

        def get_inputs():
            return torch.ones(2)
        """,
        "crash.py",
    )
    with pytest.raises(CaptureCrashed) as info:
        capture_model(str(spec), out_dir=tmp_path)
    message = str(info.value)
    assert "SIGSEGV" in message and "during capturing" in message and "about to crash" in message
    assert "about to crash" in (tmp_path / LOG_FILE).read_text()


def test_cancel_kills_the_capture(write_spec, tmp_path) -> None:
    spec = write_spec(
        """
        import time, torch

        class Slow(torch.nn.Module):
            def forward(self, x):
                time.sleep(600)

        def get_model():
            return Slow()

        def get_inputs():
            return torch.ones(2)
        """,
        "slow.py",
    )
    cancel = threading.Event()

    def on_progress(update) -> None:
        if update.stage == "capturing":
            cancel.set()

    with pytest.raises(CaptureCancelled, match="during capturing"):
        capture_model(str(spec), out_dir=tmp_path, progress=on_progress, cancel=cancel)
