"""The ``ponder`` command: ``main`` (argument parsing; ``serve`` and ``acp`` run the daemon on
stdio) and ``commands`` (``ask``, ``sessions``, ``compact``, ``models``, ``mcp``, ``login``: small clients of
a spawned daemon that speak the real protocol).

This package re-exports nothing, so ``python -m daemon`` loads ``main`` alone and the client
commands' async stack only when one runs.
"""
