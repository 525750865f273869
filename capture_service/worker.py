"""The child process of a capture: loads the user's model and captures it.

Run as ``python -m capture_service.worker --events-fd FD REQUEST_JSON``. Progress, the result
and errors go to FD as JSON lines, so the model's own prints (stdout/stderr, sent to the
capture log) cannot corrupt them. A crash of the model ends only this process.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from capture_service.errors import CaptureError
from capture_service.options import CaptureOptions
from capture_service.progress import CaptureProgress
from capture_service.session import capture_loaded
from capture_service.spec import describe_exception, load_model_spec


def request_json(model_spec: str, options: CaptureOptions, out_dir: Path) -> str:
    """The command-line request the parent passes to this worker."""
    return json.dumps({
        "model_spec": model_spec,
        "device": options.device,
        "grad_mode": options.grad_mode,
        "samples": options.samples,
        "budget_bytes": options.budget_bytes,
        "allow_unsampled": options.allow_unsampled,
        "trace_compiled": options.trace_compiled,
        "out_dir": str(out_dir),
    })


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m capture_service.worker")
    parser.add_argument("--events-fd", type=int, required=True)
    parser.add_argument("request")
    parsed = parser.parse_args(argv)
    with os.fdopen(parsed.events_fd, "w", buffering=1) as events:

        def emit(event: dict[str, Any]) -> None:
            events.write(json.dumps(event) + "\n")
            events.flush()

        try:
            request = json.loads(parsed.request)
            options = CaptureOptions(
                request["device"], request["grad_mode"], int(request["samples"]), int(request["budget_bytes"]),
                bool(request.get("allow_unsampled", False)), bool(request.get("trace_compiled", False)),
            ).validated()
            spec = str(request["model_spec"])
            emit({"event": "progress", **CaptureProgress("loading", f"loading {spec}", 0.0).to_json()})
            loaded = load_model_spec(spec)
            card_set = capture_loaded(
                spec, loaded, options, Path(request["out_dir"]),
                progress=lambda p: emit({"event": "progress", **p.to_json()}),
            )
        except CaptureError as exc:
            emit({"event": "error", "error": type(exc).__name__, "message": str(exc)})
            return 1
        except Exception as exc:
            emit({"event": "error", "error": "CaptureError", "message": f"capture failed: {describe_exception(exc)}"})
            return 1
        emit({"event": "done", "n_cards": len(card_set.cards)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
