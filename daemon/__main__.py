"""``python -m daemon`` is the ``ponder`` command."""

from daemon.cli.main import main

raise SystemExit(main())
