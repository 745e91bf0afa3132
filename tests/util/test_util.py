"""The leaf helpers in daemon/util: the one clock, the one id maker, the one scrubber, and that
they import nothing else of ponder."""

import ast
import re
import time
from pathlib import Path

from daemon.util import redact
from daemon.util.clock import new_id, now, rfc3339

UTIL = Path(__file__).resolve().parents[2] / "daemon" / "util"


def test_util_imports_nothing_else_of_ponder() -> None:
    for module in UTIL.glob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            for name in names:
                assert not re.match(r"(daemon|protocol)(\.|$)", name) or name.startswith("daemon.util"), (
                    f"{module.name} imports {name}"
                )


def test_timestamps_are_fixed_width_so_string_order_is_time_order() -> None:
    assert rfc3339(1_700_000_000) == "2023-11-14T22:13:20.000000Z"
    assert rfc3339(1_700_000_000.5) == "2023-11-14T22:13:20.500000Z"
    before = time.time()
    stamp = now()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", stamp)
    assert rfc3339(before - 1) < stamp < rfc3339(time.time() + 1)


def test_ids_are_prefixed_and_unique() -> None:
    ids = {new_id("msg") for _ in range(1000)}
    assert len(ids) == 1000
    assert all(re.fullmatch(r"msg_[0-9a-f]{24}", i) for i in ids)


def test_one_scrubber_for_text_and_bodies() -> None:
    secret, inner = "sk-outer-0123456789abcdef", "sk-outer-0123"
    assert redact.scrub(f"key={secret}", [inner, secret]) == "key=***"  # the longer first: masked whole
    assert redact.scrub(f"key={secret}".encode(), [secret]) == b"key=***"
    assert redact.scrub("short=abc1234", ["abc1234"]) == "short=abc1234"  # too short to mask safely
    assert redact.scrub(b"short=abc1234", ["abc1234"]) == b"short=abc1234"
