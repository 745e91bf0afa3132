"""The daemon's sandbox: the probe (started once, when the daemon starts: ``ProbeRun``), each
session's own settings, its temporary directory, and what the wire says about them.

``Sandbox`` is the seam the rest of the daemon uses: ``check_start`` (``-32009`` under
``[sandbox] required`` with no sandbox), ``wire`` (``Session.sandbox``), ``approves`` (may
stand in for ``ask``), ``for_command`` (what ``run_command`` gets), each given the session's
own settings (``Override``, stored with the session), and ``capability`` and ``problem``
(``initialize``). ``close`` removes the temporary directories.

What ``initialize`` and ``session/list`` need (the probe, the confinement) is all this module
imports; how a command is spawned and reported (``command``, with the mechanisms' command
lines) loads with the first ``run_command``.

The daemon's temporary directory (``make_temp_dir``, made with the first session/start or
session/list: its path is on the wire, in ``Session.sandbox``'s writable roots) is made as
``tempfile.mkdtemp(prefix=...)`` makes it, without importing ``tempfile``, which pulls in
``shutil``, ``random``, ``bz2``, ``lzma`` and their C extensions (~9 M instructions, more than a
tenth of a first session/start). What is kept from ``tempfile``:

- the place: the first of ``$TMPDIR``, ``$TEMP``, ``$TMP``, ``/tmp``, ``/var/tmp``, ``/usr/tmp``
  and the working directory where a directory can be made (``tempfile.gettempdir``'s list; its
  test writes a file there, making the directory is the same test);
- the name: the prefix and eight characters of ``tempfile``'s alphabet, here from ``os.urandom``;
- the guarantees: ``os.mkdir`` with mode 0700 fails on a name that exists, so the directory is
  new, private, and nobody else can have planted it or its contents; a taken name is retried.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from daemon.config.sandbox import SandboxSettings
from daemon.errors import SandboxUnavailable
from daemon.sandbox.confinement import Confinement, Override, decide_confinement
from daemon.sandbox.probe import ProbeRun, Support
from protocol.methods import SandboxCapability
from protocol.objects import SessionSandbox

if TYPE_CHECKING:
    from daemon.sandbox.command import CommandSandbox

__all__ = ["Sandbox", "make_temp_dir"]

log = logging.getLogger("ponder.sandbox")

# Sessions' confinements kept decided (``Sandbox.confinement``).
CONFINEMENTS_KEPT = 1024


class Sandbox:
    def __init__(
        self,
        settings: SandboxSettings,
        home: Path,
        *,
        hidden: tuple[Path, ...] = (),
        support: Support | None = None,
        probing: ProbeRun | None = None,
    ) -> None:
        """``support`` None: probe this machine (``probing``, the probe ``ponder serve`` started
        before loading its stack; else one started now); ``support`` waits for it."""
        self.settings = settings
        self.home = home
        self.hidden = hidden
        self._support = support
        self._tmp_base: Path | None = None
        self._lock = threading.Lock()  # the probe's finish
        self._tmp_lock = threading.Lock()
        self._probing = (probing or ProbeRun()) if support is None else None
        self._reported = False
        # Each session's confinement as decided (``confinement``), by (session id, cwd, override).
        self._confinements: dict[tuple[str, str, Override], Confinement] = {}

    @property
    def probed(self) -> bool:
        """Whether ``support`` answers at once (the probe is done, or its first run succeeded)."""
        return self._support is not None or (self._probing is not None and self._probing.settled())

    def wait_probed(self) -> None:
        """Block until the probe is done (call it on a worker thread from async code, unless ``probed``)."""
        with self._lock:
            if self._support is not None:
                return
            assert self._probing is not None
            try:
                found = self._probing.finish(landlock=self.settings.landlock)
            except Exception as exc:  # a probe bug must not take the daemon down: report no sandbox
                log.exception("the sandbox probe failed")
                found = Support(None, reason=f"the sandbox probe failed: {exc}")
            self._support = found
            self._probing = None
        # At debug level: initialize reports it, and at info a record here would open the log
        # file on the start path; the first command logs it at info (``for_command``).
        log.debug("sandbox: %s (%s)", found.mechanism or "none", found.reason or "ok")

    @property
    def support(self) -> Support:
        self.wait_probed()
        assert self._support is not None
        return self._support

    # --- sessions ---------------------------------------------------------------------------

    def check_start(self, override: Override, cwd: Path) -> None:
        """Raise ``SandboxUnavailable`` when a session with these settings may not be created."""
        confinement = decide_confinement(self.settings, override, self.support, cwd, self._tmp_dir("probe"))
        if confinement.refusal is not None:
            support = self.support
            raise SandboxUnavailable(
                support.mechanism,
                support.reason or f"no sandbox can be used in {cwd}.",
                support.hint,
            )

    def confinement(self, session_id: str, cwd: str | Path, override: Override) -> Confinement:
        """How a session's commands are confined. Decided once per session, cwd and override and
        kept: what it is decided from (the settings, this machine's support, the session's
        temporary directory) does not change while the daemon runs, and every turn's end asks
        (``session/updated`` carries it), ~12 µs of paths each time."""
        key = (session_id, str(cwd), override)
        kept = self._confinements.get(key)
        if kept is None:
            kept = decide_confinement(self.settings, override, self.support, Path(cwd), self._tmp_dir(session_id))
            if len(self._confinements) >= CONFINEMENTS_KEPT:
                self._confinements.clear()  # many sessions since: start over
            self._confinements[key] = kept
        return kept

    def wire(self, session_id: str, cwd: str | Path, override: Override) -> SessionSandbox:
        return self.confinement(session_id, cwd, override).wire()

    def approves(self, session_id: str, cwd: str | Path, override: Override) -> bool:
        return self.confinement(session_id, cwd, override).approves

    def for_command(self, session_id: str, cwd: str | Path, override: Override) -> CommandSandbox:
        from daemon.sandbox.command import CommandSandbox

        if not self._reported:
            self._reported = True
            support = self.support
            log.info("sandbox: %s (%s)", support.mechanism or "none", support.reason or "ok")
        return CommandSandbox(
            confinement=self.confinement(session_id, cwd, override),
            support=self.support,
            home=self.home,
            hidden=self.hidden,
            tmp_dir=self._tmp_dir(session_id),
        )

    # --- initialize -------------------------------------------------------------------------

    def capability(self) -> SandboxCapability:
        return self.support.capability()

    def problem(self) -> str | None:
        """The sentence for ``initialize.problems`` when commands would run unconfined."""
        support = self.support
        if support.available or self.settings.mode == "off":
            return None
        if self.settings.required:
            return (
                f"No OS sandbox works here: {support.reason} config.toml requires one ([sandbox] required = true), "
                f"so no session can be started and stored sessions cannot run commands. {support.hint}"
            )
        return f"No OS sandbox works here: {support.reason} run_command runs commands unconfined. {support.hint}"

    # --- temporary directories --------------------------------------------------------------

    def _tmp_dir(self, session_id: str) -> Path:
        """The session's temporary directory (made when a command first needs it)."""
        with self._tmp_lock:
            if self._tmp_base is None:
                # A fresh, private (0700), unguessable directory: nobody else can have planted it.
                self._tmp_base = Path(make_temp_dir(f"ponder-sandbox-{os.getpid()}-")).resolve()
        return self._tmp_base / session_id

    def close(self) -> None:
        if self._tmp_base is not None:
            try:
                # Empty unless a command ran (a session's directory is made by its first one):
                # then removing it needs no shutil, whose imports (bz2, lzma, ...) cost ~5 M
                # instructions on the way out.
                os.rmdir(self._tmp_base)
            except OSError:
                import shutil

                shutil.rmtree(self._tmp_base, ignore_errors=True)


# --- the temporary directory, without tempfile (see the module's docstring) ------------------

# tempfile._RandomNameSequence's alphabet, so that a name looks as tempfile's do.
NAME_CHARACTERS = "abcdefghijklmnopqrstuvwxyz0123456789_"
NAME_LENGTH = 8
# Names tried in one directory before the next is tried (tempfile.gettempdir tries 100).
ATTEMPTS_PER_DIRECTORY = 100


def temp_dir_name() -> str:
    """Eight characters of ``NAME_CHARACTERS`` (about 41 bits: unguessable, as tempfile's are)."""
    return "".join(NAME_CHARACTERS[byte % len(NAME_CHARACTERS)] for byte in os.urandom(NAME_LENGTH))


def temp_dir_parents() -> list[str]:
    """Where a temporary directory may go, in ``tempfile.gettempdir``'s order (POSIX)."""
    found = [value for name in ("TMPDIR", "TEMP", "TMP") if (value := os.environ.get(name))]
    found += ["/tmp", "/var/tmp", "/usr/tmp"]
    try:
        found.append(os.getcwd())
    except OSError:  # the working directory was removed
        pass
    return [os.path.abspath(parent) for parent in found]


def make_temp_dir(prefix: str) -> str:
    """Make and return (absolute) a new directory ``<parent>/<prefix><8 random characters>``
    with mode 0700 in the first usable parent of ``temp_dir_parents``.

    Raises ``FileNotFoundError`` (as ``tempfile.gettempdir`` does) when no parent can hold one."""
    parents = temp_dir_parents()
    for parent in parents:
        for _ in range(ATTEMPTS_PER_DIRECTORY):
            path = os.path.join(parent, prefix + temp_dir_name())
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                continue  # a name that is taken (by anyone): another one
            except OSError:
                break  # missing, not a directory, not writable, full: the next parent
            return path
    raise FileNotFoundError(f"No usable temporary directory found in {parents}")
