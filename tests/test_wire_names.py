"""The wire's parameter names live in the handlers (``daemon/server/``, ``daemon/acp/``): below
them nothing spells a request path (``$.params…``). Code below raises ``InvalidParams`` naming
the argument of its own call (``InvalidParams.argument``) and the handler layer places it on the
wire (``daemon/server/params.py``, ``daemon/acp/server.acp_error``).

The one exception is ``daemon/jsonrpc/``: it is JSON-RPC itself, and ``$.params`` there is the
envelope's member (a request whose params are not an object, or do not convert to the method's
params type), not a name of any method's parameter.
"""

import re
from pathlib import Path

import pytest

from daemon.errors import InvalidParams, UnsupportedThinkingLevel

DAEMON = Path(__file__).resolve().parent.parent / "daemon"
HANDLERS = ("server", "acp")
JSON_RPC = "jsonrpc"
WIRE_PATH = re.compile(r"\$\.params")


def spelled_below_the_handlers(daemon: Path = DAEMON) -> list[str]:
    found = []
    for source in sorted(daemon.rglob("*.py")):
        package = source.relative_to(daemon).parts[0]
        if package in HANDLERS or package == JSON_RPC:
            continue
        for number, line in enumerate(source.read_text(encoding="utf-8").splitlines(), 1):
            if WIRE_PATH.search(line):
                found.append(f"{source.relative_to(daemon.parent)}:{number}: {line.strip()}")
    return found


def test_no_request_path_is_spelled_below_the_handlers():
    assert spelled_below_the_handlers() == []


def test_the_scan_sees_what_it_looks_for(tmp_path):
    # The check above can fail: a line like the ones it forbids, in a package below the handlers.
    sessions = tmp_path / "daemon" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "bad.py").write_text('PATH = "$.params.cwd"\n', encoding="utf-8")
    (tmp_path / "daemon" / "server").mkdir()
    (tmp_path / "daemon" / "server" / "fine.py").write_text('PATH = "$.params.cwd"\n', encoding="utf-8")
    assert spelled_below_the_handlers(tmp_path / "daemon") == ['daemon/sessions/bad.py:1: PATH = "$.params.cwd"']


@pytest.mark.parametrize(
    ("error", "argument", "placed"),
    [
        (InvalidParams("bad cwd", argument="cwd"), "cwd", "$.params.cwd"),
        (InvalidParams("bad block", argument="content[2]"), "content[2]", "$.params.content[2]"),
        (UnsupportedThinkingLevel("mock/thinker", "off", ["low"]), "level", "$.params.level"),
        (UnsupportedThinkingLevel("m", "off", ["low"], argument="model_id"), "model_id", "$.params.model_id"),
    ],
)
def test_an_argument_is_placed_under_the_params_once(error, argument, placed):
    assert error.argument == argument and error.data["errors"][0]["path"] == "$"
    error.place("$.params")
    assert error.data["errors"][0]["path"] == placed and error.argument is None
    error.place("$.outer")  # placed already: stays
    assert error.data["errors"][0]["path"] == placed


def test_an_error_with_its_own_path_is_not_moved():
    error = InvalidParams("limit must be at least 1.", path="$.params.limit")
    error.place("$.elsewhere")
    assert error.data["errors"] == [{"path": "$.params.limit", "message": "limit must be at least 1."}]
