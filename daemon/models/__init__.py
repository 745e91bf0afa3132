"""The vocabulary models are described in, pure: ``spec`` (``ModelSpec``, ``ThinkingControl``,
the level scale), ``levels`` (level names, aliases, parsing, the nearest-level rule) and
``budgets`` (a level's thinking budget and output limit).

Which models exist is ``daemon.vendors.rows`` (built-in rows) and ``daemon.catalog`` (the
merged catalogue); this package names no vendor and re-exports nothing.
"""
