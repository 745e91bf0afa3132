"""``python -m daemon`` is the ``ponder`` command."""

from daemon.cli import main

raise SystemExit(main())
