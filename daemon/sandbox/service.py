"""The daemon's sandbox: the probe (started once, on a thread, when the daemon starts), each
session's own settings, its temporary directory, and what the wire says about them.

``Sandbox`` is the seam the rest of the daemon uses: ``check_start`` (``-32009`` under
``[sandbox] required`` with no sandbox), ``remember``/``copy`` (a session's ``session/start``
settings, kept while the daemon runs; a session loaded after a restart follows config.toml),
``wire`` (``Session.sandbox``), ``approves`` (may stand in for ``ask``), ``for_command`` (what
``run_command`` gets), ``capability`` and ``problem`` (``initialize``). ``close`` removes the
temporary directories.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
from pathlib import Path

from daemon.config.sandbox import SandboxSettings
from daemon.errors import SandboxUnavailable
from daemon.sandbox.command import CommandSandbox
from daemon.sandbox.confinement import Confinement, Override, decide_confinement
from daemon.sandbox.probe import Support, probe
from protocol.methods import SandboxCapability
from protocol.objects import SessionSandbox

__all__ = ["Sandbox"]

log = logging.getLogger("ponder.sandbox")


class Sandbox:
    def __init__(
        self,
        settings: SandboxSettings,
        home: Path,
        *,
        hidden: tuple[Path, ...] = (),
        support: Support | None = None,
    ) -> None:
        """``support`` None: probe this machine on a thread, now (``support`` waits for it)."""
        self.settings = settings
        self.home = home
        self.hidden = hidden
        self._support = support
        self._overrides: dict[str, Override] = {}
        self._tmp_base: Path | None = None
        self._lock = threading.Lock()
        self._probe: threading.Thread | None = None
        if support is None:
            self._probe = threading.Thread(target=self._run_probe, name="ponder-sandbox-probe", daemon=True)
            self._probe.start()

    def _run_probe(self) -> None:
        try:
            found = probe(landlock=self.settings.landlock)
        except Exception as exc:  # a probe bug must not take the daemon down: report no sandbox
            log.exception("the sandbox probe failed")
            found = Support(None, reason=f"the sandbox probe failed: {exc}")
        self._support = found
        log.info("sandbox: %s (%s)", found.mechanism or "none", found.reason or "ok")

    @property
    def probed(self) -> bool:
        return self._support is not None

    def wait_probed(self) -> None:
        """Block until the probe is done (call it on a worker thread from async code)."""
        if self._probe is not None:
            self._probe.join()

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

    def remember(self, session_id: str, override: Override) -> None:
        if override != Override():
            self._overrides[session_id] = override

    def override(self, session_id: str) -> Override:
        return self._overrides.get(session_id, Override())

    def copy(self, source_id: str, new_id: str) -> None:
        """A fork keeps its parent's settings."""
        if source_id in self._overrides:
            self._overrides[new_id] = self._overrides[source_id]

    def confinement(self, session_id: str, cwd: str | Path) -> Confinement:
        override = self._overrides.get(session_id, Override())
        return decide_confinement(self.settings, override, self.support, Path(cwd), self._tmp_dir(session_id))

    def wire(self, session_id: str, cwd: str | Path) -> SessionSandbox:
        return self.confinement(session_id, cwd).wire()

    def approves(self, session_id: str, cwd: str | Path) -> bool:
        return self.confinement(session_id, cwd).approves

    def for_command(self, session_id: str, cwd: str | Path) -> CommandSandbox:
        return CommandSandbox(
            confinement=self.confinement(session_id, cwd),
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
        with self._lock:
            if self._tmp_base is None:
                # A fresh, private (0700), unguessable directory: nobody else can have planted it.
                self._tmp_base = Path(tempfile.mkdtemp(prefix=f"ponder-sandbox-{os.getpid()}-")).resolve()
        return self._tmp_base / session_id

    def close(self) -> None:
        if self._tmp_base is not None:
            shutil.rmtree(self._tmp_base, ignore_errors=True)
