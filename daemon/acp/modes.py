"""ACP session modes: ponder's approval policies in the editor's mode picker.

A mode *is* the session's ``approval_policy`` (stored with it): ``ask``, ``auto`` and
``read_only``. The permission rules, hooks and the sandbox refine it exactly as they refine
the policy on ponder's own protocol ("Permissions", "Approval policies" in PROTOCOL.md): a
deny rule still denies under ``auto``, an allow rule never lets a change through under
``read_only``. ``session/set_mode`` stores the new policy; the running turn's next tool call
is decided under it.
"""

from typing import get_args

from daemon.acp import types as t
from daemon.store import SessionRow
from protocol.objects import ApprovalPolicy

MODES = [
    t.SessionMode(
        id="ask",
        name="Ask",
        description="Reads freely; asks before each edit or command (a rule or the sandbox may answer first).",
    ),
    t.SessionMode(
        id="auto",
        name="Auto",
        description="Runs every tool without asking, unless a permission rule or hook denies or asks.",
    ),
    t.SessionMode(
        id="read_only",
        name="Read only",
        description="Never edits files or runs commands, whatever a rule allows; reading and searching still work.",
    ),
]
MODE_IDS: list[str] = list(get_args(ApprovalPolicy))
assert [mode.id for mode in MODES] == MODE_IDS, "every approval policy is a mode, in the same order"


def mode_state(row: SessionRow) -> t.SessionModeState:
    """The modes offered and the session's own (its approval policy)."""
    return t.SessionModeState(current_mode_id=row.approval_policy, available_modes=MODES)
