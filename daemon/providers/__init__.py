"""The adapters, one module per wire API, loaded lazily (``registry``) so start-up stays fast;
the ``Provider`` Protocol (``base``), HTTP streaming (``http``), the Chat Completions dialects,
the device sign-in (Copilot's), one meaning of token usage (``usage``). The vendor facts they
read (the provider table, catalogue rows, thinking spellings, error wordings) are
``daemon.vendors``'s."""
