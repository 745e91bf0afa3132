"""Run a command under Landlock: ``python -I -S landlock_exec.py SPEC [--] PROGRAM ARG...``.

The fallback sandbox where bubblewrap cannot run (user namespaces blocked). It imports
nothing of ponder (it starts in milliseconds), confines itself, then ``exec``s PROGRAM,
which inherits the confinement and can never shed it. SPEC is JSON:
``{"read": [paths], "write": [paths], "devices": [files], "network": bool, "max_processes": n}``.

Landlock's system calls (Linux 5.13+, the same numbers on every architecture) are made
through ctypes, as the kernel documents them (Documentation/userspace-api/landlock.rst):
``landlock_create_ruleset`` with every access right this kernel's ABI knows as "handled",
one ``landlock_add_rule(LANDLOCK_RULE_PATH_BENEATH)`` per allowed tree (read and execute
under ``read``, everything under ``write``, read and write on each of ``devices``), then
``prctl(PR_SET_NO_NEW_PRIVS)`` and ``landlock_restrict_self``. Anything not allowed is
refused with EACCES, however the path is spelled (symlinks, ``..``, ``/proc/self/root``).
With ``network`` false and ABI 4 or later, TCP connect and bind are handled with no rule
(all refused); UDP and raw sockets are not covered by Landlock, which is why the daemon
reports the network as not enforced. ABI 6 or later also scopes signals and abstract
Unix sockets to the sandbox. ``max_processes`` sets RLIMIT_NPROC to the user's processes
now plus that many (the limit counts all of the user's processes; root is exempt).

Any failure is fatal (exit 126 with one line on stderr): a command never runs
unconfined by accident.
"""

import ctypes
import json
import os
import resource
import sys
from typing import Any

SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38

FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_ABI1 = (1 << 13) - 1  # EXECUTE .. MAKE_SYM
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1


class RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def fail(message: str) -> None:
    sys.stderr.write(f"ponder sandbox (landlock): {message}\n")
    sys.exit(126)


def confine(spec: dict[str, Any]) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long

    def call(*args: object) -> int:
        result = libc.syscall(*args)
        if result < 0:
            fail(f"system call {args[0]} failed: {os.strerror(ctypes.get_errno())}")
        return result

    abi = call(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), CREATE_RULESET_VERSION)
    fs = FS_ABI1 | (FS_REFER if abi >= 2 else 0) | (FS_TRUNCATE if abi >= 3 else 0) | (FS_IOCTL_DEV if abi >= 5 else 0)
    attr = RulesetAttr(handled_access_fs=fs)
    size = 8
    if abi >= 4 and not spec["network"]:
        attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP  # and no rule allows any port
    if abi >= 4:
        size = 16
    if abi >= 6:
        attr.scoped = SCOPE_SIGNAL | (0 if spec["network"] else SCOPE_ABSTRACT_UNIX_SOCKET)
        size = 24
    ruleset = call(SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    file_rights = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | (fs & (FS_TRUNCATE | FS_IOCTL_DEV))
    read = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
    device = FS_READ_FILE | FS_WRITE_FILE | (fs & (FS_TRUNCATE | FS_IOCTL_DEV))
    for paths, rights in ((spec["read"], read), (spec["write"], fs), (spec["devices"], device)):
        for path in paths:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # nothing there to allow
            is_dir = os.path.isdir(path)
            rule = PathBeneathAttr(allowed_access=rights if is_dir else rights & file_rights, parent_fd=fd)
            call(SYS_ADD_RULE, ruleset, RULE_PATH_BENEATH, ctypes.byref(rule), 0)
            os.close(fd)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        fail(f"prctl(PR_SET_NO_NEW_PRIVS) failed: {os.strerror(ctypes.get_errno())}")
    call(SYS_RESTRICT_SELF, ruleset, 0)
    os.close(ruleset)


def limit_processes(extra: int) -> None:
    if extra <= 0:
        return
    uid = os.getuid()
    mine = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                mine += os.stat(f"/proc/{name}").st_uid == uid
            except OSError:
                pass
    limit = mine + extra
    resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))


def main() -> None:
    args = sys.argv[1:]
    if len(args) < 2:
        fail("usage: landlock_exec.py SPEC [--] PROGRAM ARG...")
    spec = json.loads(args[0])
    program = args[2:] if args[1] == "--" else args[1:]
    limit_processes(int(spec.get("max_processes", 0)))
    confine(spec)
    try:
        os.execvp(program[0], program)
    except OSError as exc:
        fail(f"cannot run {program[0]}: {exc.strerror}")


if __name__ == "__main__":
    main()
