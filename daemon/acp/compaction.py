"""A compaction as ACP shows it: the unstable ``compaction_update`` (RFD session-compaction) for a
client that advertises ``clientCapabilities.session.compaction``, else one short agent message.

Used live (``compaction_start``/``compaction_end`` events) and by ``session/load``, which
replays each stored compaction at its place in the history as a terminal update.
"""

from daemon.acp import types as t
from protocol.objects import Compaction


def compaction_started(compaction_id: str) -> t.CompactionUpdate:
    return t.CompactionUpdate(compaction_id=compaction_id, status="in_progress")


def compaction_ended(
    *,
    capable: bool,
    compaction_id: str,
    status: str,
    summary: str | None = None,
    tokens_before: int | None = None,
    tokens_after: int | None = None,
    error: str | None = None,
) -> t.SessionUpdate:
    """The terminal update of a compaction (``status`` as in ponder's ``compaction_end``)."""
    if capable:
        update = t.CompactionUpdate(compaction_id=compaction_id, status=status)
        if status == "skipped":
            update.status = "_skipped"  # ACP has no status for "nothing old enough to fold": an extension one
        elif status == "completed" and summary:
            update.summary = [t.TextContent(text=summary)]
        elif status == "failed" and error:
            update.error = error
        return update
    if status == "completed" and tokens_before is not None and tokens_after is not None:
        text = f"Compacted the conversation into a summary: about {tokens_before:,} → {tokens_after:,} tokens."
    elif status == "completed":
        text = "Compacted the conversation into a summary."
    elif status == "skipped":
        text = "Nothing to compact yet: the conversation is all recent."
    elif status == "failed":
        text = f"Compaction failed: {error or 'no summary was written'}"
    else:
        text = "Compaction cancelled."
    return t.AgentMessageChunk(content=t.TextContent(text=text), message_id=f"compaction-{compaction_id}")


def stored_compaction(compaction: Compaction, *, capable: bool) -> t.SessionUpdate:
    """A stored compaction replayed by ``session/load``."""
    return compaction_ended(
        capable=capable,
        compaction_id=compaction.compaction_id,
        status="completed",
        summary=compaction.summary,
        tokens_before=compaction.tokens_before,
        tokens_after=compaction.tokens_after,
    )
