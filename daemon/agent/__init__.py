"""The agent: one turn of a session, dialect-free and vendor-free.

``context`` (what a turn is made of), ``turn`` (``run_turn``: the tool loop, the budget check
before each model call, retries and backoff), ``reply`` (one streamed reply: watchdog,
checkpoints, usage, finish), ``compaction`` (the history a request sends, when to compact, one
compaction), ``level_retry`` (the retry after a provider refuses a thinking level), ``tools``
(one reply's tool calls), ``structured`` and ``output_schema`` (a prompt's output schema:
checked, asked for, judged), ``history`` (messages saved, cancelled results, ``repair_history``),
``call_ids`` (tool-call ids unique in a session) and ``media`` (the images a request carries).
This module only re-exports.
"""

from daemon.agent.context import (
    SHUTDOWN_GRACE_S,
    AppendParts,
    Approval,
    Approve,
    BudgetSpent,
    CompactionRequest,
    CompactionSetup,
    Emit,
    Observe,
    RecordUsage,
    RunTool,
    Summarizer,
    ToolOutcome,
    Turn,
    TurnSettings,
    error_info,
)
from daemon.agent.history import CANCELLED_RESULT, repair_history
from daemon.agent.media import TurnMedia
from daemon.agent.structured import NativeRefusals, OutputRequest, TurnOutput
from daemon.agent.turn import run_turn

__all__ = [
    "CANCELLED_RESULT",
    "SHUTDOWN_GRACE_S",
    "AppendParts",
    "Approval",
    "Approve",
    "BudgetSpent",
    "CompactionRequest",
    "CompactionSetup",
    "Emit",
    "NativeRefusals",
    "Observe",
    "OutputRequest",
    "RecordUsage",
    "RunTool",
    "Summarizer",
    "ToolOutcome",
    "Turn",
    "TurnMedia",
    "TurnOutput",
    "TurnSettings",
    "error_info",
    "repair_history",
    "run_turn",
]
