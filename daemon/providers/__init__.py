"""Everything that knows a vendor: the provider table (``table``), the catalogue rows
(``models``), how each API spells a thinking level (``thinking_params``), the Chat
Completions dialects, the device sign-in (Copilot's), one meaning of token usage (``usage``), a
provider's refusal of a thinking level (``level_rejections``), and the adapters, one module per
wire API, loaded lazily (``registry``) so start-up stays fast."""
