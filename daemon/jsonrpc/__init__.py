"""JSON-RPC 2.0 over newline-delimited JSON; knows no ponder method.

``framing`` (``LineSplitter``, ``OVERLONG``, the outgoing stream's ``Written`` marks), ``stdio``
(``open_stdio``: the stdin reader thread and the one stdout writer), ``connection``
(``Connection``: envelopes, dispatch, cancellation, outgoing requests, and ``as_wire_error``, the
one place an exception becomes a wire error), ``client`` (``RpcClient``, ``spawn_daemon``,
``connect_memory``: the reference client) and ``spawn`` (the stdlib-only ``ponder serve`` command
line, so a client can start the daemon before it imports its async stack).

This package re-exports nothing: importing one part never loads the others (the start-up path).
"""
