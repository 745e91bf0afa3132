"""The stored device sign-in: the GitHub token file ``<home>/copilot.json``.

Written atomically and created with mode 0600 (never written first and narrowed after); read
as a ``Secret``, so it is masked wherever text leaves us. ``daemon.config.settings`` reads it
when it loads the config (``apply_stored_login``); the device flow that writes it is
``daemon.providers.device_login``'s. Only the file's name and the kind of a failure are ever
logged: the content is a credential.
"""

import logging
import os
from pathlib import Path

from daemon.config.home import make_private_dir
from daemon.util.secret import Secret
from daemon.vendors.table import GITHUB_CLIENT_ID

__all__ = ["TOKEN_FILE", "load_github_token", "save_github_token", "token_path"]

log = logging.getLogger("ponder.auth")

TOKEN_FILE = "copilot.json"


def token_path(home: Path) -> Path:
    return home / TOKEN_FILE


def load_github_token(home: Path) -> Secret | None:
    """The stored GitHub token, or None when there is none (or the file is unusable)."""
    path = token_path(home)
    try:
        text = path.read_text(encoding="utf-8")
        import json  # only once there is a file (most homes have none)

        data = json.loads(text)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        # Name the file and the kind of failure only: the content is a credential.
        log.warning("%s is unreadable (%s); sign in again with auth/login", path, type(exc).__name__)
        return None
    token = data.get("github_token") if isinstance(data, dict) else None
    if not isinstance(token, str) or not token:
        log.warning("%s holds no GitHub token; sign in again with auth/login", path)
        return None
    return Secret(token)


def save_github_token(home: Path, token: Secret) -> None:
    """Store the token in ``<home>/copilot.json``, mode 0600, replacing any earlier one.

    The file is created 0600 by ``os.open`` (never written first and narrowed after, which
    would leave a moment where others can read it) and moved into place atomically, so a
    crash leaves either the old file or the new one.
    """
    import json

    make_private_dir(home)  # a sign-in may be the first thing to make the home
    path = token_path(home)
    tmp = home / f".{TOKEN_FILE}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    data = json.dumps({"github_token": token.reveal(), "client_id": GITHUB_CLIENT_ID}).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
