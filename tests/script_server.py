"""A local OpenAI-compatible ``/v1/chat/completions`` server (127.0.0.1) that answers
from a strict ScriptedChatModel, by stage.

The server tells the stage of a request from its ``response_format`` (the output model's
name; none: a ``rollout``), so the real openai adapter, structured output and pipeline
run end to end with no monkeypatching. The ``serve`` fixture (conftest.py) starts them.
A request with ``tools`` is a tool-calling ``rollout`` turn: the step's ToolTurn comes
back as the message's ``tool_calls``.
"""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from expgit.llm.scripted import ScriptedChatModel, ScriptError
from expgit.sessions.ingest.segment_output import SegmentOutput
from expgit.sessions.score_output import ScoreOutput
from expgit.train.components.evaluator import JudgeVerdict
from expgit.train.components.group_outputs import GroupReflectOutput
from expgit.train.components.llm_outputs import (
    AnalyzeOutput,
    CompressOutput,
    EstimateOutput,
    MergeOutput,
    ReflectOutput,
)

STAGES = {JudgeVerdict.__name__: "judge", AnalyzeOutput.__name__: "analyze",
          EstimateOutput.__name__: "estimate", MergeOutput.__name__: "merge",
          CompressOutput.__name__: "compress", SegmentOutput.__name__: "segment",
          ScoreOutput.__name__: "score", ReflectOutput.__name__: "reflect",
          GroupReflectOutput.__name__: "group_reflect"}


def stage_of(body: dict[str, Any]) -> str:
    fmt = body.get("response_format")
    if not fmt:
        return "rollout"
    name = fmt.get("json_schema", {}).get("name") or fmt.get("schema", {}).get("title")
    return STAGES[name]


class ScriptServer:
    """An OpenAI-compatible ``/v1/chat/completions`` answering from a ScriptedChatModel;
    an unexpected call is answered HTTP 400 and recorded in ``unexpected``."""

    def __init__(self, chat: ScriptedChatModel) -> None:
        self.chat = chat
        self.requests = 0
        self.unexpected: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests += 1
                if body.get("tools"):
                    self._tools(body)
                    return
                try:
                    done = asyncio.run(server.chat.complete(
                        body["messages"], stage=stage_of(body),
                        response_format=body.get("response_format"),
                        max_tokens=body.get("max_tokens", 0),
                        temperature=body.get("temperature", 0), seed=body.get("seed")))
                except ScriptError as exc:
                    self._unexpected(exc)
                    return
                self._completion(body, {"role": "assistant", "content": done.text},
                                 done.finish_reason, done.prompt_tokens,
                                 done.completion_tokens)

            def _tools(self, body: dict[str, Any]) -> None:
                try:
                    turn = asyncio.run(server.chat.complete_tools(
                        body["messages"], body["tools"], stage="rollout",
                        max_tokens=body.get("max_tokens", 0),
                        temperature=body.get("temperature", 0)))
                except ScriptError as exc:
                    self._unexpected(exc)
                    return
                message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
                if turn.tool_calls:
                    message["tool_calls"] = [{"id": c.id, "type": "function", "function": {
                        "name": c.name, "arguments": c.arguments}} for c in turn.tool_calls]
                self._completion(body, message, "tool_calls" if turn.tool_calls else "stop",
                                 turn.prompt_tokens, turn.completion_tokens)

            def _unexpected(self, exc: ScriptError) -> None:
                server.unexpected.append(str(exc))
                self._send(400, {"error": {"message": str(exc), "type": "script"}})

            def _completion(self, body: dict[str, Any], message: dict[str, Any],
                            finish_reason: str | None, prompt: int, completion: int) -> None:
                self._send(200, {
                    "id": "chatcmpl-1", "object": "chat.completion", "created": 0,
                    "model": body["model"], "choices": [{
                        "index": 0, "finish_reason": finish_reason, "message": message}],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                              "total_tokens": prompt + completion}})

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
