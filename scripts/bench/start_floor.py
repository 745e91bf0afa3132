"""The floor for the start-up measures: the least a daemon on ponder's stack takes to answer.

Standalone: ``python scripts/bench/start_floor.py``. It imports what any ponder daemon must
(``sqlite3``, ``anyio`` with its asyncio backend, ``msgspec``), starts an event loop, reads
one JSON-RPC request line from stdin on a worker thread (as ponder's stdio reader does),
writes its answer to stdout, and exits at end of input. Nothing of ponder: no config, no
store, no logging. ponder's ``serve`` → ``initialize`` answered, ``ask``, ``sessions`` and
EOF → exit are measured against it in the same rounds.
"""

import sqlite3  # noqa: F401 - part of the floor: the store's driver
import sys

import anyio
import anyio._backends._asyncio  # anyio.run loads it; named so the floor says what it holds
import msgspec

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode


async def main() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    line = await anyio.to_thread.run_sync(stdin.readline)
    request = _decode(line)
    reply = {"jsonrpc": "2.0", "id": request.get("id"), "result": {"protocol_version": 1}}
    stdout.write(_encode(reply) + b"\n")
    stdout.flush()
    await anyio.to_thread.run_sync(stdin.read)  # until end of input, like a daemon


if __name__ == "__main__":
    anyio.run(main)
