"""The lines of ``ponder ask --json`` (PROTOCOL.md "Structured output and headless runs"): one JSON
object a line, first an ``AskHeader``, then each ``agent/event``'s params, last an ``AskResult``
(also when the run fails or is interrupted). ``protocol_version`` says which shapes these are;
within a version they only gain fields.
"""

from typing import Any, Literal

import msgspec

from protocol.objects import Cost, StopReason, Usage

# What a run ended as, and its exit status: success 0, error 1, limit 3 (tool_limit, budget,
# max_tokens), denied 4 (a tool call refused before it ran), schema_failed 5, cancelled 130.
AskStatus = Literal["success", "error", "limit", "denied", "schema_failed", "cancelled"]


class AskHeader(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, tag_field="type", tag="header"):
    """The first line: which protocol the lines that follow speak, and the session they belong to."""

    protocol_version: int
    ponder_version: str
    session_id: str


class AskResult(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, tag_field="type", tag="result"):
    """The last line: how the run ended. ``result`` is the text of the prompt turn's last assistant
    message (with ``--output-schema``, the JSON text of ``structured_output``); ``usage`` the run's
    total; ``cost`` null when no price is known; ``stop_reason`` null when no turn ended."""

    status: AskStatus
    stop_reason: StopReason | None
    result: str | None
    structured_output: Any
    usage: Usage
    cost: Cost | None
    session_id: str
    exit_code: int


AskLine = AskHeader | AskResult
