"""The permission prompt of ``ponder ask``: asks the person at the terminal before a tool
changes anything, offering the answers the daemon offered (once, session, always here, no,
deny always) and showing the rule a session or "always" answer keeps."""

import sys
from typing import Any

import anyio

_KEYS = {"y": "allow_once", "s": "allow_session", "a": "allow_always", "n": "deny", "d": "deny_always"}
_LABELS = {"y": "[y]es once", "s": "[s]ession", "a": "[a]lways here", "n": "[N]o", "d": "[d]eny always"}


async def ask_permission(method: str, params: Any) -> Any:
    if method != "permission/request":
        raise ValueError(f"unexpected request {method}")
    # Only the options the daemon offered (a call no rule can be made from offers once or no).
    offered = [key for key, decision in _KEYS.items() if decision in params.get("options", [])]
    rule = params.get("suggested_rule") or {}
    words = [w if isinstance(w, str) else "{" + ",".join(w) + "}" for w in rule.get("pattern") or []]
    what = " ".join(words) or rule.get("path") or ""

    def ask() -> str:
        reason = f" ({params['reason']})" if params.get("reason") else ""
        kept = f"\n(session/always keep the rule: {rule.get('tool')} {what})" if what else ""
        choices = " / ".join(_LABELS[key] for key in offered)
        sys.stderr.write(f"\n{params['title']}{reason}{kept}\nAllow? {choices}: ")
        sys.stderr.flush()
        with open("/dev/tty") as tty:
            answer = tty.readline().strip().lower()[:1]
        return _KEYS[answer] if answer in offered else "deny"

    return {"decision": await anyio.to_thread.run_sync(ask, abandon_on_cancel=True)}
