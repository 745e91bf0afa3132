"""``serve.token`` in the home: the 256-bit bearer token every WebSocket client presents
(PROTOCOL.md "Transports and several clients"). Created owner-only (0600) when absent, kept
across restarts, replaced by ``ponder serve --new-token``; compared in constant time."""

import hmac
import os
import secrets
from pathlib import Path

from daemon.config.home import make_private_dir, open_private

TOKEN_FILE = "serve.token"
TOKEN_BYTES = 32  # 256 bits


def token_path(home: Path) -> Path:
    return home / TOKEN_FILE


def read_token(home: Path) -> str | None:
    """The home's token, or None when there is none (or it is empty)."""
    try:
        text = token_path(home).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text or None


def ensure_token(home: Path) -> str:
    """The home's token, made first when there is none."""
    return read_token(home) or _write(home, secrets.token_urlsafe(TOKEN_BYTES))


def new_token(home: Path) -> Path:
    """Replace the home's token (clients holding the old one are refused from now on)."""
    _write(home, secrets.token_urlsafe(TOKEN_BYTES))
    return token_path(home)


def _write(home: Path, token: str) -> str:
    make_private_dir(home)
    path = token_path(home)
    partial = path.with_name(TOKEN_FILE + ".new")
    fd = open_private(partial, os.O_WRONLY | os.O_TRUNC)
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write(token + "\n")
    os.replace(partial, path)  # whole or absent: a daemon starting meanwhile never reads half a token
    return token


def token_matches(presented: str, expected: str) -> bool:
    """Constant-time comparison: how long it takes says nothing about how much of a guess was right."""
    return hmac.compare_digest(presented.encode("utf-8", "surrogatepass"), expected.encode("ascii"))
