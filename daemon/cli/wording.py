"""The daemon's messages said for a person at the ``ponder`` command.

The daemon speaks to editors and scripts, so its errors name protocol methods and fields
(``session/list``, ``approval_policy 'auto'``, ``budget_tokens`` at its JSONPath). The command line
says what to type instead: ``ponder sessions``, ``--approval auto``, ``--thinking-budget``.
Every message the client commands print from the daemon goes through ``for_person``.
"""

import re

from daemon.vendors.table import DEVICE_LOGIN_PROVIDERS

_LOGIN = " or ".join(f"`ponder login {name}`" for name in DEVICE_LOGIN_PROVIDERS) or "`ponder login`"

# (pattern, replacement), applied in order: the longer phrases before the bare method names.
_REWRITES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"list sessions with session/list"), "list them with `ponder sessions`"),
    (re.compile(r"See models/list for the models ponder knows\."), "`ponder models` lists the models ponder knows."),
    (re.compile(r"auth/login \(ponder login (\w+)\)"), r"`ponder login \1`"),
    (re.compile(r"\bauth/login\b"), _LOGIN),
    (
        re.compile(r"\(session/compact, or /compact in an editor; "),
        "(`ponder compact SESSION`, or /compact in an editor; ",
    ),
    (re.compile(r"\bsession/compact\b"), "`ponder compact SESSION`"),
    (re.compile(r"\bwith thinking/set\b"), "with --thinking"),
    (re.compile(r"\bthinking/set\b"), "--thinking"),
    (re.compile(r"\bmodel/set\b"), "--model"),
    (re.compile(r"\bmcp/list\b"), "`ponder mcp`"),
    (re.compile(r"approval_policy '(\w+)' or '(\w+)'"), r"--approval \1 or --approval \2"),
    (re.compile(r"approval_policy '(\w+)'"), r"--approval \1"),
]

# A params path's last field -> the option that sets it.
PARAM_OPTIONS = {
    "budget_tokens": "--thinking-budget",
    "level": "--thinking",
    "thinking_level": "--thinking",
    "model_id": "--model",
    "cwd": "--cwd",
    "approval_policy": "--approval",
    "limit": "--limit",
    "instructions": "the instructions",
    "session_id": "the session id",
    "provider": "the provider",
}
_INVALID = re.compile(r"^Invalid params: (?P<detail>.*?) \(at \$\.params\.(?P<path>[\w.\[\]]+)\)\.?$", re.DOTALL)
_TYPES = {"`int`": "a whole number", "`str`": "text", "`float`": "a number", "`bool`": "true or false"}


def for_person(message: str) -> str:
    """``message`` with every protocol name replaced by what to type at the command line."""
    invalid = _INVALID.match(message)
    if invalid is not None:
        field = re.split(r"[.\[]", invalid["path"])[-1]
        option = PARAM_OPTIONS.get(field, field)
        detail = invalid["detail"]
        for name, said in _TYPES.items():
            detail = detail.replace(name, said)
        message = f"{option}: {detail[:1].lower()}{detail[1:]}."
    for pattern, replacement in _REWRITES:
        message = pattern.sub(replacement, message)
    return message
