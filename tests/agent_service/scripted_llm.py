"""A real OpenAI-compatible HTTP server on loopback that plays scripted answers, for litellm."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Scripted:
    """One answer: a chat completion (status 200) or an error status, optionally late."""

    content: str = ""
    status: int = 200
    delay_s: float = 0.0
    prompt_tokens: int = 1000
    completion_tokens: int = 500
    model: str = "gpt-4o-mini"
    headers: dict[str, str] = field(default_factory=dict)


class ScriptedLlmServer:
    """Serves ``/v1/chat/completions`` from a queue of :class:`Scripted` answers; records requests.

    ``respond``, where given, writes each answer from the request instead of the queue.
    """

    def __init__(self, script: list[Scripted], respond: Callable[[dict[str, Any]], Scripted] | None = None) -> None:
        self.script = list(script)
        self.respond = respond
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with owner._lock:
                    owner.requests.append(body)
                    if owner.respond is not None:
                        answer = owner.respond(body)
                    elif owner.script:
                        answer = owner.script.pop(0)
                    else:
                        answer = Scripted(status=500, content="script exhausted")
                time.sleep(answer.delay_s)
                if answer.status != 200:
                    payload = {"error": {"message": answer.content or "error", "type": "rate_limit_error"
                                         if answer.status == 429 else "server_error", "code": answer.status}}
                else:
                    payload = {
                        "id": f"chatcmpl-{len(owner.requests)}", "object": "chat.completion",
                        "created": int(time.time()), "model": answer.model,
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": answer.content},
                                     "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens,
                                  "total_tokens": answer.prompt_tokens + answer.completion_tokens},
                    }
                data = json.dumps(payload).encode()
                try:
                    self.send_response(answer.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for key, value in answer.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> ScriptedLlmServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
