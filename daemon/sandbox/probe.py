"""Which OS sandbox works on this machine: probed once, when the daemon starts.

``ProbeRun`` starts the first check at once (``ponder serve`` does it before it imports its
stack, so the ``bwrap`` child runs beside the daemon's start-up) and ``finish`` collects it;
the rare fallbacks (an older bwrap, no network namespace, Landlock) run only when it failed.
``probe`` does both in one call.

Linux: bubblewrap first. Only a ``bwrap`` found on ``PATH`` counts, and never one in a
relative ``PATH`` entry or in a directory inside the daemon's working directory (a
repository must not be able to plant its own; ``Support.bwrap_usable_for`` applies the same
rule to each session's ``cwd``). It is run once with the flags commands get; when user
namespaces are blocked (AppArmor's ``apparmor_restrict_unprivileged_userns``, a hardened
container) it fails, and Landlock (ABI read with ``landlock_create_ruleset``, then a real
confined ``true`` through ``landlock_exec.py``) is the fallback. macOS: ``/usr/bin/sandbox-exec``
with a trivial profile. Anything else: none, and ``reason``/``hint`` say why and what to do.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import msgspec

from protocol.methods import SandboxCapability
from protocol.objects import SandboxMechanism

__all__ = ["PROBE_TIMEOUT_S", "ProbeRun", "Support", "find_trusted", "landlock_abi", "probe"]

PROBE_TIMEOUT_S = 10.0
INSTALL_HINT = (
    "Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap); where user "
    "namespaces are blocked (Ubuntu 24.04's AppArmor), install the bwrap-userns-restrict AppArmor profile."
)
LANDLOCK_EXEC = Path(__file__).with_name("landlock_exec.py")
_SYS_LANDLOCK_CREATE_RULESET = 444  # the same number on every architecture
_LANDLOCK_CREATE_RULESET_VERSION = 1


class Support(msgspec.Struct, frozen=True):
    """What the probe found. ``mechanism`` None: no sandbox works here (``reason`` says why).
    (A Struct, not a dataclass: it is built on the start path, where a dataclass's generated
    methods cost a compile each.)"""

    mechanism: SandboxMechanism | None
    network_isolation: bool = False
    reason: str | None = None
    hint: str = INSTALL_HINT
    bwrap: Path | None = None
    bwrap_disable_userns: bool = False  # bwrap >= 0.8: no user namespace can be made inside
    prlimit: Path | None = None  # sets the process limit inside (util-linux)
    landlock_abi: int = 0
    python: str = sys.executable  # runs landlock_exec.py

    @property
    def available(self) -> bool:
        return self.mechanism is not None

    def capability(self) -> SandboxCapability:
        return SandboxCapability(
            available=self.available,
            mechanism=self.mechanism,
            network_isolation=self.network_isolation,
            reason=self.reason,
        )

    def bwrap_usable_for(self, cwd: Path) -> bool:
        """Whether the bwrap found lies outside ``cwd`` (a session's own tree never supplies it)."""
        return self.bwrap is not None and not _inside(self.bwrap, cwd)


def probe(daemon_cwd: Path | None = None, path_env: str | None = None, *, landlock: bool = True) -> Support:
    """The sandbox this machine offers now (slow: runs bwrap or a Landlock child once);
    ``landlock`` False: bubblewrap or nothing (config.toml ``[sandbox] landlock = false``)."""
    return ProbeRun(daemon_cwd, path_env).finish(landlock=landlock)


class ProbeRun:
    """A probe under way: on Linux with a trusted ``bwrap``, its first run (the flags commands
    get) is started when this is made; ``finish`` waits for it (usually long done) and takes
    the next steps only when it failed. ``finish`` is called once, by one thread."""

    def __init__(self, daemon_cwd: Path | None = None, path_env: str | None = None) -> None:
        daemon_cwd = Path.cwd() if daemon_cwd is None else daemon_cwd
        path_env = os.environ.get("PATH", os.defpath) if path_env is None else path_env
        self._system = system_name()
        self._prlimit: Path | None = None
        self._bwrap: Path | None = None
        self._first: _Child | None = None
        if self._system == "Linux":
            self._prlimit = find_trusted("prlimit", path_env, daemon_cwd)
            self._bwrap = find_trusted("bwrap", path_env, daemon_cwd)
            if self._bwrap is not None:
                self._first = _Child(_bwrap_probe_argv(self._bwrap, network=True, disable_userns=True))

    def settled(self) -> bool:
        """Whether ``finish`` would return at once: the first run succeeded already (else it
        may wait for the child or run the fallbacks: call it on a worker thread)."""
        return self._first is not None and self._first.succeeded()

    def finish(self, *, landlock: bool = True) -> Support:
        if self._system == "Darwin":
            return _probe_seatbelt()
        if self._system != "Linux":
            return Support(None, reason=f"ponder has no OS sandbox for {self._system}.", hint="")
        bwrap_failure = "bubblewrap (bwrap) is not installed, or not on PATH outside the working directory."
        if self._bwrap is not None and self._first is not None:
            support, bwrap_failure = _probe_bwrap(self._bwrap, self._prlimit, self._first.failure())
            if support is not None:
                return support
        if not landlock:
            return Support(None, reason=f"{bwrap_failure} The Landlock fallback is off ([sandbox] landlock = false).")
        abi = landlock_abi()
        if abi <= 0:
            return Support(None, reason=f"{bwrap_failure} Landlock is not available either (kernel 5.13 or later).")
        failure = _run_probe([sys.executable, "-I", "-S", str(LANDLOCK_EXEC), _landlock_probe_spec(), "true"])
        if failure:
            return Support(None, reason=f"{bwrap_failure} Landlock (ABI {abi}) failed too: {failure}")
        return Support(
            "landlock",
            network_isolation=False,
            reason=(
                f"{bwrap_failure} Using Landlock (ABI {abi}) instead: it confines writes to the writable roots but "
                "cannot keep .git read-only, hide the ponder home, or cut the network "
                + ("(it blocks TCP only)." if abi >= 4 else "(this kernel's Landlock cannot restrict sockets).")
            ),
            landlock_abi=abi,
            prlimit=self._prlimit,
        )


def system_name() -> str:
    """What ``platform.system()`` says ("Linux", "Darwin", ...), without importing ``platform``
    on the daemon's start path (its import compiles nine regular expressions)."""
    return _SYSTEMS.get(sys.platform, sys.platform)


_SYSTEMS = {"linux": "Linux", "darwin": "Darwin"}


def find_trusted(name: str, path_env: str, daemon_cwd: Path) -> Path | None:
    """The first executable ``name`` on ``path_env``, skipping relative entries and those
    inside ``daemon_cwd`` (unless that is ``/``, which holds everything); its real path.
    (os.path, not pathlib: it runs on the daemon's start path, once per ``PATH`` entry.)"""
    cwd = _real(daemon_cwd)
    for entry in path_env.split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            continue
        candidate = os.path.join(entry, name)
        if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
            continue
        if _within(_real(entry), cwd):
            continue
        real = _real(candidate)
        if real is not None and not _within(real, cwd):
            return Path(real)
    return None


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when it has none (or this is not Linux)."""
    if system_name() != "Linux":
        return 0
    import ctypes  # only here: most machines never need the Landlock fallback

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        version = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), _LANDLOCK_CREATE_RULESET_VERSION)
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


def _inside(path: Path, directory: Path) -> bool:
    return _within(_real(path), _real(directory))


def _real(path: str | Path) -> str | None:
    try:
        return os.path.realpath(path)
    except OSError:
        return None


def _within(real: str | None, real_dir: str | None) -> bool:
    """Whether ``real`` is ``real_dir`` or below it (both resolved; "/" holds everything: as a
    working directory it is nobody's repository)."""
    if real is None or real_dir is None or real_dir == os.sep:
        return False
    return real == real_dir or real.startswith(real_dir.rstrip(os.sep) + os.sep)


def _bwrap_probe_argv(bwrap: Path, *, network: bool, disable_userns: bool) -> list[str]:
    """bwrap running ``true`` with the namespaces commands get (``network``: a network namespace
    too; ``disable_userns``: bwrap 0.8's ``--disable-userns``)."""
    return [
        str(bwrap),
        "--die-with-parent",
        "--new-session",
        "--unshare-user",
        "--unshare-pid",
        *(["--unshare-net"] if network else []),
        *(["--disable-userns"] if disable_userns else []),
        *["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--", "true"],
    ]


def _probe_bwrap(bwrap: Path, prlimit: Path | None, first_failure: str) -> tuple[Support | None, str]:
    """(support, "") when bwrap works; (None, why not) when it does not. ``first_failure`` is the
    outcome of the first run (network namespace, ``--disable-userns``): "" when it worked."""
    disable_userns = True
    failure = first_failure
    if failure and "disable-userns" in failure:  # an older bwrap: the same without the flag
        disable_userns = False
        failure = _run_probe(_bwrap_probe_argv(bwrap, network=True, disable_userns=False))
    if not failure:
        return Support(
            "bubblewrap",
            network_isolation=True,
            bwrap=bwrap,
            bwrap_disable_userns=disable_userns,
            prlimit=prlimit,
            reason=_root_note(prlimit),
        ), ""
    # Some hosts refuse only the network namespace (loopback: Failed RTM_NEWADDR): bwrap still
    # confines files, but the network stays open, and Session.sandbox says so.
    if not _run_probe(_bwrap_probe_argv(bwrap, network=False, disable_userns=False)):
        return Support(
            "bubblewrap",
            network_isolation=False,
            bwrap=bwrap,
            prlimit=prlimit,
            reason=f"bubblewrap cannot make a network namespace here ({first_failure}); the network stays open.",
        ), ""
    return None, f"bubblewrap at {bwrap} does not work here: {first_failure}"


def _root_note(prlimit: Path | None) -> str | None:
    if prlimit is None:
        return "prlimit (util-linux) was not found: commands run without a process limit."
    if os.geteuid() == 0:
        return "ponder runs as root, whom Linux exempts from the process limit (RLIMIT_NPROC)."
    return None


def _probe_seatbelt() -> Support:
    exe = Path("/usr/bin/sandbox-exec")
    if not exe.is_file():
        return Support(None, reason="/usr/bin/sandbox-exec is missing.", hint="")
    failure = _run_probe([str(exe), "-p", "(version 1)(allow default)", "/usr/bin/true"])
    if failure:
        return Support(None, reason=f"sandbox-exec does not work here: {failure}", hint="")
    return Support(
        "sandbox-exec",
        network_isolation=True,
        reason="macOS sandbox-exec (Seatbelt) is deprecated by Apple and used best effort.",
    )


def _run_probe(argv: list[str]) -> str:
    """'' when ``argv`` ran and exited 0; else one line saying what went wrong."""
    return _Child(argv).failure()


class _Child:
    """One probe command, started when made (it runs while the caller goes on)."""

    def __init__(self, argv: list[str]) -> None:
        self._spawn_failure = ""
        self._process: subprocess.Popen[bytes] | None = None
        try:
            self._process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_probe_env()
            )
        except (OSError, subprocess.SubprocessError) as exc:
            self._spawn_failure = str(exc)

    def succeeded(self) -> bool:
        """Whether it has exited 0 already (never waits)."""
        return self._process is not None and self._process.poll() == 0

    def failure(self) -> str:
        """'' when it exited 0; else one line saying what went wrong (waits for it to end)."""
        process = self._process
        if process is None:
            return self._spawn_failure
        try:
            _, stderr = process.communicate(timeout=PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            process.kill()
            process.communicate()
            return str(exc)
        if process.returncode == 0:
            return ""
        lines = stderr.decode("utf-8", "replace").strip().splitlines()
        return (lines[-1] if lines else f"exit status {process.returncode}").strip()


def _probe_env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", os.defpath), "LANG": "C"}


def _landlock_probe_spec() -> str:
    # msgspec, not json: without a usable bwrap this runs before initialize is answered.
    spec = {"read": ["/"], "write": [], "devices": ["/dev/null"], "network": False, "max_processes": 0}
    return msgspec.json.encode(spec).decode()
