"""The OS sandbox ``run_command`` runs in (PROTOCOL.md "Sandbox").

``probe`` finds, once at start, which mechanism works here (bubblewrap, else Landlock on
Linux; ``sandbox-exec`` on macOS); ``confinement`` decides what one session's commands get
(mode, network, writable roots, what is enforced and what is not); ``bwrap``, ``landlock``
and ``seatbelt`` turn that into the command line that runs a command confined;
``command`` is what ``run_command`` holds (how to spawn, how to report); ``denial`` guesses
whether the sandbox stopped a command; ``service`` ties them to the daemon's sessions.
Nothing here imports a tool or a session: ``daemon.tools`` and ``daemon.sessions`` use it.
"""
