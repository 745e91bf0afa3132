"""A hand-written stdio MCP server that misbehaves on purpose (stdlib only: starts fast).

Usage: ``misbehaving.py MODE [--stubborn]``

- ``exit-at-start``: writes a fatal message to stderr and exits 3 before answering.
- ``silent``: reads its input and never answers anything.
- ``serve``: a working server whose tools misbehave:
  ``echo`` (read-only) answers; ``crash`` writes to stderr and exits 5 mid-call (only the
  first time when ``MCP_TEST_DIR`` is set: it leaves ``crashed`` there); ``hang`` never
  answers its call (but records ``notifications/cancelled`` in ``cancelled-<id>``);
  ``freeze`` makes the whole server stop answering, pings included; ``ping_me`` sends the
  client a ``ping`` and a ``roots/list`` and answers with what came back.
- ``--stubborn``: ignores SIGTERM and the end of its input, and starts a child (in its
  process group) that ignores SIGTERM too; only SIGKILL ends them.

``MCP_TEST_DIR`` (optional) receives ``<mode>.pid`` and, with ``--stubborn``, ``child.pid``.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

MODE = sys.argv[1] if len(sys.argv) > 1 else "serve"
STUBBORN = "--stubborn" in sys.argv
STATE = Path(os.environ["MCP_TEST_DIR"]) if os.environ.get("MCP_TEST_DIR") else None

TOOLS = [
    {
        "name": "echo",
        "description": "Echo the text back.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        "annotations": {"readOnlyHint": True},
    },
    {"name": "crash", "description": "Crashes the server.", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "hang", "description": "Never answers.", "inputSchema": {"type": "object"}},
    {"name": "freeze", "description": "The server stops answering.", "inputSchema": {"type": "object"}},
    {"name": "ping_me", "description": "Pings the client.", "inputSchema": {"type": "object"}},
]


def send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def result(request_id, value: dict) -> None:
    send({"jsonrpc": "2.0", "id": request_id, "result": value})


def main() -> None:
    if STATE is not None:
        (STATE / f"{MODE}.pid").write_text(str(os.getpid()))
    if MODE == "exit-at-start":
        sys.stderr.write("fatal: WIDGET_TOKEN is not set\n")
        sys.exit(3)
    if STUBBORN:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        # SIG_IGN survives exec: the child ignores SIGTERM as well.
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        if STATE is not None:
            (STATE / "child.pid").write_text(str(child.pid))
    frozen = False
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if MODE == "silent" or frozen:
            continue
        if method == "initialize":
            result(request_id, {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": "misbehaving", "version": "0"},
            })  # fmt: skip
        elif method == "tools/list":
            result(request_id, {"tools": TOOLS})
        elif method == "ping":
            result(request_id, {})
        elif method == "notifications/cancelled" and STATE is not None:
            (STATE / f"cancelled-{message['params']['requestId']}").write_text(message["params"].get("reason", ""))
        elif method == "tools/call":
            name = message["params"]["name"]
            if name == "echo":
                text = message["params"]["arguments"]["text"]
                result(request_id, {"content": [{"type": "text", "text": f"echo: {text}"}]})
            elif name == "crash":
                if STATE is not None and (STATE / "crashed").exists():
                    result(request_id, {"content": [{"type": "text", "text": "survived"}]})
                    continue
                if STATE is not None:
                    (STATE / "crashed").write_text("yes")
                sys.stderr.write("boom: the widget exploded\n")
                sys.stderr.flush()
                os._exit(5)
            elif name == "freeze":
                frozen = True
            elif name == "ping_me":
                # Ask the client two things and wait for both answers before answering the call.
                send({"jsonrpc": "2.0", "id": "s1", "method": "ping"})
                send({"jsonrpc": "2.0", "id": "s2", "method": "roots/list"})
                answers = {}
                while len(answers) < 2:
                    reply = json.loads(sys.stdin.readline())
                    if reply.get("id") in ("s1", "s2"):
                        answers[reply["id"]] = reply.get("result", reply.get("error"))
                text = json.dumps([answers["s1"], answers["s2"]["code"]])
                result(request_id, {"content": [{"type": "text", "text": text}]})
            # hang: no answer, ever
        elif request_id is not None:
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "Method not found"}})
    if STUBBORN:
        while True:
            time.sleep(1)


if __name__ == "__main__":
    main()
