"""Masking credentials in text that leaves the daemon (tool output into events, the store
and the model), also when a streamed chunk boundary splits one."""


class SecretMask:
    """Replaces credentials with ``***`` in streamed text, also when a chunk boundary splits one.

    Only a tail that could be the start of a credential is held back, so ordinary output
    streams as it comes. Values shorter than 8 characters are left alone (they would mangle
    ordinary text), as ``daemon.providers.http.read_error_body`` does.
    """

    def __init__(self, secrets: list[str]) -> None:
        self.secrets = sorted({s for s in secrets if len(s) >= 8}, key=len, reverse=True)
        self.pending = ""

    def scrub(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text

    def feed(self, chunk: str) -> str:
        if not self.secrets:
            return chunk
        text = self.scrub(self.pending + chunk)
        held = 0
        for secret in self.secrets:
            for k in range(min(len(secret) - 1, len(text)), held, -1):
                if text.endswith(secret[:k]):
                    held = k
                    break
        self.pending = text[len(text) - held :] if held else ""
        return text[: len(text) - held]

    def flush(self) -> str:
        text, self.pending = self.pending, ""
        return text
