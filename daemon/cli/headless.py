"""What ``ponder ask`` promises a script (PROTOCOL.md "Structured output and headless runs"): the
``--output-schema`` file read and checked before anything runs, the run's outcome (``RunRecord``:
what its events said) turned into a status and an exit code, and the ``--json`` header and result
lines (``protocol.headless``).

Exit codes: success 0; error 1; usage or config error 2 (the run never started: no result line);
limit 3 (``tool_limit``, ``budget``, ``max_tokens``); denied 4 (a tool call refused before it ran,
even if the model then answered); schema_failed 5; cancelled 130 (SIGINT or SIGTERM). Where several
apply, the first in the order 130, 1, 5, 3, 4 wins.
"""

import json
import sys
from dataclasses import dataclass, field
from typing import Any

import msgspec

from daemon import __version__
from protocol import PROTOCOL_VERSION
from protocol.headless import AskHeader, AskResult, AskStatus
from protocol.objects import Cost, Usage

EXIT_CODES: dict[AskStatus, int] = {
    "success": 0,
    "error": 1,
    "limit": 3,
    "denied": 4,
    "schema_failed": 5,
    "cancelled": 130,
}
USAGE_ERROR = 2
LIMIT_STOPS = ("tool_limit", "budget", "max_tokens")
# Errors that say the command asked for something that cannot be (no run starts): exit 2.
USAGE_CODES = frozenset({-32602, -32002, -32003, -32006})
MAX_SCHEMA_FILE_BYTES = 64 * 1024 * 1024  # read no further: the daemon takes 1 MiB of schema anyway


class UsageError(Exception):
    """A mistake in the command line or its files, said in one sentence: exit 2, nothing runs."""


def load_output_schema(path: str) -> dict[str, Any]:
    """The ``--output-schema`` file as a JSON Schema the daemon will take, else ``UsageError`` naming the file."""
    from daemon.agent.output_schema import check_schema  # only when a schema is given
    from daemon.errors import InvalidOutputSchema

    try:
        with open(path, "rb") as file:
            data = file.read(MAX_SCHEMA_FILE_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"--output-schema {path}: cannot read it ({exc.strerror or exc}).") from None
    try:
        schema = msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise UsageError(f"--output-schema {path}: not JSON ({exc}).") from None
    try:
        check_schema(schema)
    except InvalidOutputSchema as exc:
        where = exc.data["errors"][0]["path"]
        raise UsageError(f"--output-schema {path}: {exc.message} (at {where}).") from None
    return schema


@dataclass
class RunRecord:
    """What ``ponder ask`` learns of its run from the turn's events."""

    session_id: str
    denied: bool = False  # a tool call was refused before it ran
    last_text: str | None = None  # the text blocks of the turn's last assistant message
    cost: float | None = None  # the run's model calls, summed (null while none had a price)
    currency: str = "USD"
    end: dict[str, Any] = field(default_factory=dict)  # the turn_end, once it came

    def see(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "tool_execution_start":
            permission = event.get("permission") or {}
            if permission.get("decision") == "deny":
                self.denied = True
        elif kind == "message_end" and event["message"]["role"] == "assistant":
            texts = [b["text"] for b in event["message"]["content"] if b["type"] == "text"]
            self.last_text = "\n".join(texts)
        elif kind == "usage" and event.get("cost"):
            self.cost = (self.cost or 0.0) + event["cost"]["amount"]
            self.currency = event["cost"].get("currency", "USD")
        elif kind == "turn_end":
            self.end = event

    def status(self, *, interrupted: bool = False, failed: bool = False) -> AskStatus:
        """The run's status, the first that applies in the order 130, 1, 5, 3, 4."""
        stop = self.end.get("stop_reason")
        if interrupted or stop == "cancelled":
            return "cancelled"
        if failed or not self.end or stop in ("error", "refusal"):
            return "error"
        if stop == "schema_failed":
            return "schema_failed"
        if stop in LIMIT_STOPS:
            return "limit"
        if self.denied:
            return "denied"
        return "success"

    def result(self, *, structured: bool) -> str | None:
        """``result``: with ``--output-schema`` the answer's JSON text (null without one), else the
        last reply's text."""
        if structured:
            answer = self.end.get("structured_output")
            ended_with_answer = self.end.get("stop_reason") == "end_turn"
            return json.dumps(answer, ensure_ascii=False) if ended_with_answer else None
        return self.last_text

    def result_line(self, status: AskStatus, *, structured: bool) -> AskResult:
        usage = self.end.get("usage")
        return AskResult(
            status=status,
            stop_reason=self.end.get("stop_reason"),
            result=self.result(structured=structured),
            structured_output=self.end.get("structured_output"),
            usage=msgspec.convert(usage, Usage) if usage else Usage(),
            cost=None if self.cost is None else Cost(amount=round(self.cost, 10), currency=self.currency),
            session_id=self.session_id,
            exit_code=EXIT_CODES[status],
        )


def header_line(session_id: str) -> AskHeader:
    return AskHeader(protocol_version=PROTOCOL_VERSION, ponder_version=__version__, session_id=session_id)


def write_line(line: AskHeader | AskResult) -> None:
    """One ``--json`` line on stdout, flushed at once (a script reads it as it comes)."""
    sys.stdout.write(msgspec.json.encode(line).decode() + "\n")
    sys.stdout.flush()
