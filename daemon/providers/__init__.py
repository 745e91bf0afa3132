"""Everything that knows a vendor: the provider table (``table``), the catalogue rows
(``models``), how each API spells a thinking level (``thinking_params``), the Chat
Completions dialects, the device sign-in (Copilot's), and the adapters, one module per wire API,
loaded lazily (``registry``) so start-up stays fast."""
