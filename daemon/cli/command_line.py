"""The first words of a ``ponder`` command line, read without argparse: the global options
before the command, and the constants both ``daemon.cli.main`` and the serve line
(``daemon.cli.serving``) need. It imports nothing: it is on every command's start path."""

BACKEND_ENV = "PONDER_ASYNC_BACKEND"  # asyncio (default) or trio
LOG_LEVELS = ("debug", "info", "warning", "error")
DEFAULT_MAX_LINE_BYTES = 32 * 1024 * 1024


def global_options(argv: list[str]) -> tuple[str | None, str, list[str]] | None:
    """``--home H`` and ``--log-level L`` (either spelling) before the command: (home, level,
    the command and its arguments); None when anything else comes first (argparse reads it)."""
    home, level, rest = None, "info", list(argv)
    while rest and rest[0].startswith("-"):
        option, _, inline = rest.pop(0).partition("=")
        if option not in ("--home", "--log-level") or (not inline and not rest):
            return None
        value = inline or rest.pop(0)
        if value.startswith("-"):
            return None  # argparse takes it for an option
        if option == "--home":
            home = value
        elif value in LOG_LEVELS:
            level = value
        else:
            return None
    return home, level, rest
