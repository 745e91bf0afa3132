"""Every vendor fact, as data or a pure function: the provider table and wire APIs (``table``),
the built-in catalogue rows (``rows``), how each API spells a thinking level
(``thinking_params``), how vendors word a refused level (``level_rejections``) and a context
overflow (``overflow``).

Imports only ``daemon.models`` (the vocabulary), ``daemon.errors``, ``protocol`` and the
standard library: config, the catalogue and the adapters read these facts from above, and no
module here imports an adapter or httpx. This package re-exports nothing.
"""
