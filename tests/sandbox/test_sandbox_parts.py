"""The sandbox's decisions, without running a command: config.toml ``[sandbox]``, which
``bwrap`` is trusted, what a session gets on this machine, the command lines, the guess that
the sandbox stopped a command."""

import os
import sys
import time
from pathlib import Path

import pytest

from daemon.config.sandbox import SandboxSettings, parse_sandbox
from daemon.config.sections import SandboxSection, read_section
from daemon.config.settings import load_config
from daemon.sandbox.bwrap import bwrap_argv
from daemon.sandbox.confinement import Override, decide_confinement
from daemon.sandbox.denial import looks_denied
from daemon.sandbox.probe import ProbeRun, Support, find_trusted, probe
from daemon.sandbox.seatbelt import seatbelt_profile

BWRAP = Support("bubblewrap", network_isolation=True, bwrap=Path("/usr/bin/bwrap"), prlimit=Path("/usr/bin/prlimit"))
LANDLOCK = Support("landlock", landlock_abi=6)
NONE = Support(None, reason="bubblewrap is not installed.")


def sandbox_of(table: dict[str, object], problems: list[str]) -> SandboxSettings:
    """``[sandbox]`` as config.toml's reader reads it: its types, then its roots."""
    return parse_sandbox(read_section(table, "sandbox", SandboxSection, problems), problems)


def test_sandbox_config_defaults_and_bad_values(tmp_path):
    assert sandbox_of({}, []) == SandboxSettings()
    assert SandboxSettings().mode == "workspace_write" and not SandboxSettings().network
    problems: list[str] = []
    extra = tmp_path / "cache"
    extra.mkdir()
    settings = sandbox_of(
        {"mode": "everything", "network": "yes", "required": True, "writable_roots": [str(extra), "rel", "/nope/x"]},
        problems,
    )
    assert settings.mode == "workspace_write" and settings.network is False and settings.required
    assert settings.writable_roots == (extra.resolve(),)
    assert len(problems) == 4 and any("everything" in p for p in problems)
    assert any("'rel' is not an absolute path" in p for p in problems)


def test_config_toml_sandbox_section_is_read(tmp_path):
    (tmp_path / "config.toml").write_text('[sandbox]\nmode = "read_only"\nnetwork = true\nauto_approve = false\n')
    config = load_config(tmp_path, env={})
    assert (config.sandbox.mode, config.sandbox.network, config.sandbox.auto_approve) == ("read_only", True, False)
    assert config.problems == []


def _executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_a_bwrap_planted_in_the_working_directory_or_a_relative_path_entry_is_ignored(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    _executable(repo / "bwrap")
    _executable(repo / "bin" / "bwrap")
    real = _executable(tmp_path / "system" / "bwrap")
    monkeypatch.chdir(repo)
    path_env = os.pathsep.join([".", "bin", str(repo), str(repo / "bin"), str(real.parent)])
    assert find_trusted("bwrap", path_env, repo) == real
    assert find_trusted("bwrap", os.pathsep.join([".", str(repo)]), repo) is None
    # A symlink outside the tree that leads into it is resolved and refused too.
    (tmp_path / "link").mkdir()
    (tmp_path / "link" / "bwrap").symlink_to(repo / "bwrap")
    assert find_trusted("bwrap", str(tmp_path / "link"), repo) is None


def test_the_probe_skips_a_planted_bwrap_and_finds_the_real_one(tmp_path):
    marker = tmp_path / "planted-ran"
    _executable(tmp_path / "bwrap", f"#!/bin/sh\ntouch {marker}\nexit 0\n")
    found = probe(daemon_cwd=tmp_path, path_env=os.pathsep.join([str(tmp_path), os.environ.get("PATH", "")]))
    assert not marker.exists()
    assert found.bwrap is None or tmp_path not in found.bwrap.parents


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bubblewrap is probed on Linux only")
def test_the_probe_runs_bwrap_as_soon_as_it_is_made_and_finish_collects_it(tmp_path):
    # ponder serve makes the ProbeRun before it loads its stack: the child runs meanwhile.
    marker = tmp_path / "ran"
    fake = _executable(tmp_path / "fakebin" / "bwrap", f'#!/bin/sh\necho "$@" > {marker}\nexit 0\n')
    run = ProbeRun(daemon_cwd=Path("/"), path_env=str(fake.parent))
    deadline = time.monotonic() + 30
    while not run.settled() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert run.settled(), "the first bwrap run was not started when the probe was made"
    assert "--unshare-net --disable-userns" in marker.read_text()  # the flags commands get
    found = run.finish()
    assert found.mechanism == "bubblewrap" and found.network_isolation and found.bwrap == fake.resolve()
    assert found.bwrap_disable_userns


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bubblewrap is probed on Linux only")
def test_an_older_bwrap_without_disable_userns_is_run_again_without_it(tmp_path):
    fake = _executable(
        tmp_path / "fakebin" / "bwrap",
        '#!/bin/sh\ncase "$*" in *--disable-userns*) echo "bwrap: Unknown option --disable-userns" >&2; exit 1;; esac\n'
        "exit 0\n",
    )
    found = probe(daemon_cwd=Path("/"), path_env=str(fake.parent))
    assert found.mechanism == "bubblewrap" and found.network_isolation and not found.bwrap_disable_userns


def test_a_failing_bwrap_falls_back_to_landlock_or_says_why(tmp_path):
    fake = _executable(
        tmp_path / "fakebin" / "bwrap",
        "#!/bin/sh\necho 'bwrap: loopback: Failed RTM_NEWADDR: Operation not permitted' >&2\nexit 1\n",
    )
    found = probe(daemon_cwd=Path("/"), path_env=str(fake.parent))
    assert found.mechanism in ("landlock", None)
    assert found.reason is not None and "RTM_NEWADDR" in found.reason
    none = probe(daemon_cwd=Path("/"), path_env=str(fake.parent), landlock=False)
    assert none.mechanism is None and "landlock = false" in (none.reason or "")


def test_confinement_by_mode_mechanism_and_requirement(tmp_path):
    cwd, tmp = tmp_path / "w", tmp_path / "t"
    full = decide_confinement(SandboxSettings(), Override(), BWRAP, cwd, tmp)
    assert full.enforced and full.writable_roots == (cwd, tmp) and not full.network and full.degraded == ()
    assert full.approves
    assert full.wire().writable_roots == [str(cwd), str(tmp)]
    with_net = decide_confinement(SandboxSettings(), Override(network=True), BWRAP, cwd, tmp)
    assert with_net.enforced and with_net.network and not with_net.approves
    read_only = decide_confinement(SandboxSettings(), Override(mode="read_only"), BWRAP, cwd, tmp)
    assert read_only.writable_roots == () and read_only.approves
    off = decide_confinement(SandboxSettings(), Override(mode="off"), BWRAP, cwd, tmp)
    assert not off.enforced and off.network and not off.approves and off.mechanism is None
    fallback = decide_confinement(SandboxSettings(), Override(), LANDLOCK, cwd, tmp)
    assert fallback.enforced and fallback.degraded == ("git", "home", "network") and not fallback.approves
    no_auto = decide_confinement(SandboxSettings(auto_approve=False), Override(), BWRAP, cwd, tmp)
    assert no_auto.enforced and not no_auto.approves
    unconfined = decide_confinement(SandboxSettings(), Override(), NONE, cwd, tmp)
    assert not unconfined.enforced and unconfined.refusal is None
    refused = decide_confinement(SandboxSettings(required=True), Override(), NONE, cwd, tmp)
    assert refused.refusal is not None and refused.refusal.startswith("sandbox_unavailable:")
    assert "apt-get install bubblewrap" in refused.refusal


def test_a_session_whose_tree_holds_the_bwrap_gets_no_bubblewrap(tmp_path):
    support = Support("bubblewrap", network_isolation=True, bwrap=tmp_path / "tools" / "bwrap")
    inside = decide_confinement(SandboxSettings(required=True), Override(), support, tmp_path, tmp_path / "t")
    assert (
        not inside.enforced
        and inside.refusal is not None
        and "inside the session's working directory" in inside.refusal
    )


def test_bwrap_mounts_parents_first_and_protects_git_and_the_home(tmp_path):
    cwd = tmp_path / "home" / "w"
    (cwd / ".git").mkdir(parents=True)
    home = tmp_path / "home"
    confinement = decide_confinement(SandboxSettings(), Override(), BWRAP, cwd, tmp_path / "t")
    argv = bwrap_argv(BWRAP, confinement, "make test", cwd, home, ())
    joined = " ".join(argv)
    for flag in ("--die-with-parent", "--new-session", "--unshare-net", "--unshare-pid", "--cap-drop ALL"):
        assert flag in joined
    assert argv[-3:] == ["/bin/sh", "-c", "make test"]
    assert "--nproc=" in joined
    home_hidden = joined.index(f"--tmpfs {home}")
    assert joined.index("--tmpfs /tmp") < home_hidden < joined.index(f"--bind {cwd} {cwd}")
    assert joined.index(f"--bind {cwd} {cwd}") < joined.index(f"--ro-bind {cwd / '.git'} {cwd / '.git'}")
    assert joined.index(f"--remount-ro {home}") > joined.index(f"--ro-bind {cwd / '.git'}")
    opened = decide_confinement(SandboxSettings(network=True), Override(), BWRAP, cwd, tmp_path / "t")
    assert "--unshare-net" not in bwrap_argv(BWRAP, opened, "x", cwd, home, ())


@pytest.mark.parametrize(
    ("returncode", "output", "network", "denied"),
    [
        (1, "touch: cannot touch '/etc/x': Read-only file system", False, True),
        (1, "sh: cannot create /x: Permission denied", False, True),
        (6, "curl: (6) Could not resolve host: example.com", False, True),
        (6, "curl: (6) Could not resolve host: example.com", True, False),
        (1, "OSError: [Errno 101] Network is unreachable", False, True),
        (0, "Read-only file system", False, False),
        (2, "make: *** [test] Error 2", False, False),
    ],
)
def test_denial_guess(returncode, output, network, denied):
    assert looks_denied(True, network, returncode, output) is denied
    assert looks_denied(False, network, returncode, output) is False


def test_seatbelt_profile_denies_writes_outside_git_home_and_network(tmp_path):
    confinement = decide_confinement(
        SandboxSettings(), Override(), Support("sandbox-exec", network_isolation=True), tmp_path / 'a"b', tmp_path / "t"
    )
    profile = seatbelt_profile(confinement, tmp_path / "home")
    assert '(deny file-write* (subpath "/"))' in profile
    assert f'(subpath "{tmp_path}/a\\"b")' in profile
    assert f'(deny file-write* (subpath "{tmp_path}/a\\"b/.git"))' in profile
    assert "(deny network*)" in profile and "home" in profile
