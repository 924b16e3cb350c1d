"""The grading sandbox seen from inside: one sandboxed kernel, asked what it can see and reach.

These are the guarantees the README states; the round trip (test_grading.py) shows the same from
the outside, with hostile submissions.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pwd
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import seqmodels
from seqmodels.grading.sandbox import SANDBOX_UID, Sandbox, SandboxedKernelManager

pytestmark = pytest.mark.grading
ROOT = Path(__file__).resolve().parents[1]

# Every folder the sandbox lets its uid write to (its mount point: file system and size).
WRITABLE = r"""
import json, os
mounts = {}  # mount point: file system type
for line in open("/proc/self/mountinfo"):
    fields = line.split()
    mounts[fields[4]] = fields[fields.index("-") + 1]
writable = {}
for top, folders, _ in os.walk("/"):
    folders[:] = [f for f in folders if os.path.join(top, f) not in ("/proc", "/sys")]
    if os.access(top, os.W_OK):
        point = max((m for m in mounts if top == m or top.startswith(m.rstrip("/") + "/")), key=len)
        size = os.statvfs(top)
        writable[point] = [mounts[point], size.f_blocks * size.f_frsize]
"""

PROBE = r"""
import json, os, socket, subprocess, sys
facts = {}
facts["preloaded"] = [m for m in ("torch", "torch._inductor") if m in sys.modules]
facts["uid"] = os.getuid()
facts["cwd"] = os.getcwd()
facts["cwd_files"] = sorted(os.listdir("."))
facts["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
facts["course_paths"] = {p: os.path.exists(p) for p in PATHS}
facts["course_listings"] = {p: sorted(os.listdir(p)) for p in PATHS if os.path.isdir(p)}
facts["interfaces"] = sorted(name for _, name in socket.if_nameindex())
try:
    socket.create_connection(("127.0.0.1", PORT), timeout=2)
    facts["host_loopback"] = "reached"
except OSError as error:
    facts["host_loopback"] = type(error).__name__
try:
    open("/run/submission/new.txt", "w")
    facts["submission_writable"] = True
except OSError:
    facts["submission_writable"] = False
try:
    open(sys.prefix + "/pyvenv.cfg", "a")
    facts["python_writable"] = True
except OSError:
    facts["python_writable"] = False
errors = {}
for name in ("seqmodels.ngram", "seqmodels.metrics", "seqmodels.grading.references"):
    try:
        __import__(name)
        errors[name] = "imported"
    except ImportError as error:
        errors[name] = str(error)
import importlib
try:
    importlib.import_module("seqmodels.feedforward")
    errors["importlib"] = "imported"
except ImportError as error:
    errors["importlib"] = str(error)
facts["imports"] = errors
import seqmodels.device, seqmodels.seeding, seqmodels.grading, seqmodels.synthetic
facts["allowed_imports"] = True
import ctypes, errno, resource, shutil
facts["fds"] = {}
for fd in os.listdir("/proc/self/fd"):
    try:
        facts["fds"][fd] = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass  # the descriptor listdir itself used
facts["fsize"] = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
facts["seccomp"] = [l.split()[1] for l in open("/proc/self/status") if l.startswith("Seccomp:")]
libc = ctypes.CDLL(None, use_errno=True)
def refused(result):
    return result == -1 and errno.errorcode[ctypes.get_errno()]
CLONE_NEWUSER, SIGCHLD = 0x10000000, 17
facts["unshare_user"] = refused(libc.unshare(CLONE_NEWUSER))
pid = libc.syscall(56, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)  # x86-64's clone, called as fork does
if pid == 0:
    os._exit(0)  # the child, were clone not refused
facts["clone_user"] = refused(pid) or os.waitpid(pid, 0) and "allowed"
facts["clone3"] = refused(libc.syscall(435, None, 0))  # clone3, on every architecture
facts["no_aslr"] = refused(libc.personality(0x0040000))  # ADDR_NO_RANDOMIZE
facts["unshare_cmd"] = shutil.which("unshare") and subprocess.run(
    ["unshare", "-U", "true"], capture_output=True).returncode
facts["ptrace"] = refused(libc.ptrace(16, 1, 0, 0))  # ATTACH to 1
WRITABLE
facts["writable"] = writable
try:
    with open("/run/kernel/fill", "wb") as f:
        f.write(b"x" * (8 * 2**20))
    facts["kernel_fill"] = "written"
except OSError as error:
    facts["kernel_fill"] = errno.errorcode.get(error.errno, str(error.errno))
if os.path.exists("/run/kernel/fill"):
    os.remove("/run/kernel/fill")
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         start_new_session=True)
facts["child"] = child.pid
print(json.dumps(facts))
""".replace("WRITABLE", WRITABLE)
# What reaches the kernel's own stderr (ipykernel copies its fd 2 there): 10 MB, a forged log line
# and a terminal escape, which must reach neither the grader's descriptors nor, past a cap, its log.
FLOOD = r"""
import os
os.write(2, b"\x1b[2J[AutogradeApp | ERROR] forged\r\n" + b"x" * 10_000_000)
"""


def _execute(kc, code: str) -> str:
    async def go():
        chunks = []

        def output(msg):
            if msg["msg_type"] == "stream":
                chunks.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                chunks.append("\n".join(msg["content"]["traceback"]))

        await kc.execute_interactive(code, timeout=120, output_hook=output)
        return "".join(chunks)

    return asyncio.run(go())


@pytest.fixture(scope="module", params=["warm", "cold"])
def inside(request, tmp_path_factory):
    """Facts a sandboxed kernel reports about its world, with a TCP server on the host's loopback:
    a kernel forked from the zygote (`kernel_forks`), and one started cold."""
    submission = tmp_path_factory.mktemp("autograded") / "student" / "ps1"
    submission.mkdir(parents=True)
    (submission / "ps1.ipynb").write_text("{}")
    (submission / "data.txt").write_text("the student's own file")
    server = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=lambda: server.accept(), daemon=True).start()
    paths = [str(ROOT), str(ROOT / "solutions"), str(submission.parent.parent), "/work"]
    code = PROBE.replace("PATHS", repr(paths)).replace("PORT", str(server.getsockname()[1]))

    logged: list[str] = []  # the grader's log
    log, handler = logging.getLogger("test_sandbox.grader"), logging.Handler()
    handler.emit = lambda record: logged.append(record.getMessage())
    log.addHandler(handler)

    async def session():
        km = SandboxedKernelManager(kernel_name="python3", log=log)
        km.sandbox = Sandbox(memory_mb=2048)
        km.warm = request.param == "warm"
        await km.start_kernel(cwd=str(submission))
        kc = km.client()
        kc.start_channels()
        await kc.wait_for_ready(timeout=60)
        return km, kc

    grader = tmp_path_factory.mktemp("grader") / "stdout-and-stderr"
    saved = [os.dup(1), os.dup(2)]
    with open(grader, "wb") as sink:  # the grader's own descriptors 1 and 2 while the kernel runs
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
    try:
        km, kc = asyncio.run(session())
        try:
            text = _execute(kc, code)
            facts = json.loads(text.strip().splitlines()[-1])
            namespace, members = pid_namespace(km.provisioner.pid)
            run_dir = km._run
            _execute(kc, FLOOD)
        finally:
            kc.stop_channels()
            asyncio.run(km.shutdown_kernel(now=True))
            server.close()
        deadline = time.monotonic() + 10  # the stream readers log when the kernel's pipes close
        while not any("forged" in line for line in logged) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        for fd, copy in zip((1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)
        log.removeHandler(handler)
    return {
        "log": logged,
        "grader_output": grader.read_bytes(),
        "facts": facts,
        "run_dir": run_dir,
        "namespace": namespace,
        "members": members,
        "text": text,
        "mode": request.param,
    }


def pid_namespace(outer: int) -> tuple[str, list[int]]:
    """The PID namespace bwrap (host pid `outer`) made, and the host pids of every process in it."""
    children = Path(f"/proc/{outer}/task/{outer}/children").read_text().split()
    namespace = os.readlink(f"/proc/{children[0]}/ns/pid")
    return namespace, members_of(namespace)


def members_of(namespace: str) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and os.readlink(entry / "ns" / "pid") == namespace:
                members.append(int(entry.name))
        except OSError:
            pass
    return members


def test_the_kernel_runs_as_an_unprivileged_user_in_a_scratch_copy_of_its_folder(inside):
    facts = inside["facts"]
    assert facts["uid"] == SANDBOX_UID
    assert facts["cwd"] == "/home/student"
    assert {"ps1.ipynb", "data.txt"} <= set(facts["cwd_files"])
    assert facts["submission_writable"] is False and facts["python_writable"] is False


def test_a_forked_kernel_starts_with_torch_and_what_set_deterministic_imports(inside):
    """The zygote imported them (`kernel_zygote.PRELOAD`); a cold kernel imports them itself."""
    expected = ["torch", "torch._inductor"] if inside["mode"] == "warm" else []
    assert inside["facts"]["preloaded"] == expected


def test_the_course_directory_does_not_exist_in_the_kernel(inside):
    """Nothing of it is there: at most the folders on the way to the Python environment, when
    the environment is inside it (it is mounted, read-only, at its own path)."""
    venv = Path(sys.prefix).resolve()
    on_the_way = {str(p): p for p in venv.parents}
    facts = inside["facts"]
    assert {p for p, there in facts["course_paths"].items() if there} <= set(on_the_way)
    for path, listing in facts["course_listings"].items():
        assert listing == [venv.relative_to(path).parts[0]], (path, listing)


def test_the_kernel_sees_only_its_own_processes_and_has_no_network(inside):
    facts = inside["facts"]
    assert max(facts["pids"]) < 50 and 1 in facts["pids"]  # its own PID namespace
    assert facts["interfaces"] == ["lo"]
    assert facts["host_loopback"] in {"ConnectionRefusedError", "OSError", "TimeoutError"}


def test_graded_implementations_cannot_be_imported_by_any_means(inside):
    imports = inside["facts"]["imports"]
    for name, message in imports.items():
        assert "not available while your notebook is graded" in message, (name, message)
    assert inside["facts"]["allowed_imports"] is True


def test_nothing_of_the_kernel_remains_after_shutdown(inside):
    assert len(inside["members"]) >= 3  # bwrap's init, the kernel, the kernel's detached child
    deadline = time.monotonic() + 5  # SIGKILL reaches every member at once; reaping takes a moment
    while members_of(inside["namespace"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert members_of(inside["namespace"]) == []
    assert not inside["run_dir"].exists()


def test_the_kernel_holds_no_descriptor_of_the_grader(inside):
    """Only pipes, sockets, /dev/null, anonymous inodes and files in its own tmpfs folders."""
    fds = inside["facts"]["fds"]
    assert fds["0"] == "/dev/null" and fds["1"].startswith("pipe:") and fds["2"].startswith("pipe:")
    kinds = ("pipe:[", "socket:[", "anon_inode:", "/dev/null")
    scratch = tuple(f"{folder}/" for folder in ("/home/student", "/tmp", "/dev/shm", "/run/kernel"))
    assert {
        fd: target for fd, target in fds.items() if not target.startswith(kinds + scratch)
    } == {}


def test_the_kernel_runs_under_seccomp_and_cannot_make_namespaces(inside):
    facts = inside["facts"]
    assert facts["seccomp"] == ["2"]  # filter mode
    assert facts["unshare_user"] == "EPERM" and facts["clone_user"] == "EPERM"
    assert facts["clone3"] == "ENOSYS"  # so that the C library falls back to clone
    assert facts["unshare_cmd"] is None or facts["unshare_cmd"] != 0  # `unshare -U true`
    assert facts["no_aslr"] == "EPERM" and facts["ptrace"] == "EPERM"


def _assert_small_tmpfs(writable: dict, scratch: int = Sandbox().scratch_mb * 2**20) -> None:
    for point, (kind, size) in writable.items():
        if kind == "devpts":  # /dev/pts, as an ordinary user: terminals, never files
            continue
        assert kind == "tmpfs" and 0 < size <= scratch, (point, kind, size)


def test_every_folder_the_kernel_can_write_is_a_small_tmpfs(inside):
    facts = inside["facts"]
    assert facts["fsize"] == 256 * 2**20
    assert {"/home/student", "/tmp", "/dev/shm", "/run/kernel"} <= set(facts["writable"])
    _assert_small_tmpfs(facts["writable"])
    assert facts["writable"]["/run/kernel"][1] <= 2**20
    assert facts["kernel_fill"] == "ENOSPC"  # 8 MiB into the socket folder


def test_as_an_ordinary_user_too_only_the_small_tmpfs_folders_are_writable(tmp_path):
    """There bwrap's own tmpfs (/, /dev, folders hiding modules) belong to the sandbox's uid."""
    writable = _as_ordinary_user(NONROOT.replace("WRITABLE", repr(WRITABLE)))
    assert {"/home/student", "/tmp", "/dev/shm", "/run/kernel"} <= set(writable)
    _assert_small_tmpfs(writable)


def _as_ordinary_user(script: str) -> dict:
    """Run `script` as the ordinary user of `SEQMODELS_TEST_USER` (default seqgrader) when this is
    root, as ourselves otherwise; its last line of output, as JSON."""
    user = os.environ.get("SEQMODELS_TEST_USER", "seqgrader")
    command = [sys.executable, "-c", script]
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(user)
        except KeyError:
            if os.environ.get("SEQMODELS_REQUIRE_NONROOT"):
                pytest.fail(f"no user {user!r} to run a sandbox as (.ci/run creates it)")
            pytest.skip(f"no user {user!r} (useradd {user}, or set SEQMODELS_TEST_USER)")
        command = ["runuser", "-u", user, "--", *command]
    result = subprocess.run(command, capture_output=True, text=True, timeout=180, cwd="/")
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_as_an_ordinary_user_a_forked_kernel_is_confined_like_a_cold_one():
    """The zygote's kernel joins bwrap's user namespace (and the nested one) before the others."""
    facts = {warm: _as_ordinary_user(FORKED.replace("WARM", str(warm))) for warm in (True, False)}
    for warm, seen in facts.items():
        assert seen["uid"] == SANDBOX_UID and seen["nnp"] == ["1"] and seen["seccomp"] == ["2"]
        assert seen["caps"] == [["0000000000000000"]] * 5, warm
        assert seen["ppid"] == 1 and max(seen["pids"]) < 50, warm
        assert seen["unshare"] == "EPERM", warm
        _assert_small_tmpfs(seen["writable"])
    assert facts[True]["writable"].keys() == facts[False]["writable"].keys()


FORKED = """
import asyncio, json, tempfile
from seqmodels.grading.sandbox import Sandbox, SandboxedKernelManager
CODE = r'''
import ctypes, errno, json, os
st = {l.split(":")[0]: l.split(":", 1)[1].split() for l in open("/proc/self/status")}
libc = ctypes.CDLL(None, use_errno=True)
refused = libc.unshare(0x10000000) == -1 and errno.errorcode[ctypes.get_errno()]
WRITABLE
print(json.dumps({"uid": os.getuid(), "ppid": os.getppid(), "nnp": st["NoNewPrivs"],
    "caps": [st[k] for k in ("CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb")],
    "seccomp": st["Seccomp"], "unshare": refused, "writable": writable,
    "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())}))
'''
async def main():
    km = SandboxedKernelManager(kernel_name="python3")
    km.sandbox, km.warm = Sandbox(memory_mb=2048), WARM
    with tempfile.TemporaryDirectory() as folder:
        await km.start_kernel(cwd=folder)
        kc = km.client()
        kc.start_channels()
        await kc.wait_for_ready(timeout=60)
        out = []
        hook = lambda m: out.append(m["content"].get("text", ""))
        await kc.execute_interactive(CODE, timeout=120, output_hook=hook)
        kc.stop_channels()
        await km.shutdown_kernel(now=True)
    print("".join(out).strip().splitlines()[-1])
asyncio.run(main())
""".replace("WRITABLE", WRITABLE)


NONROOT = """
import json, subprocess, tempfile
from pathlib import Path
from seqmodels.grading.sandbox import Sandbox
sandbox = Sandbox(hidden_packages=["rapidfuzz"])  # one module hidden under a tmpfs
with tempfile.TemporaryDirectory() as tmp:
    run = Path(tmp)
    sandbox.prepare(run, {})
    walk = WRITABLE + "print(json.dumps(writable))"
    argv = sandbox.bwrap_argv(run, run / "course", [sandbox.python(), "-c", walk])
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
print(result.stdout or result.stderr)
"""


def test_the_kernels_output_reaches_the_log_capped_and_escaped_and_never_the_grader(inside):
    assert b"forged" not in inside["grader_output"] and b"x" * 100 not in inside["grader_output"]
    assert any("sandboxed kernel's stdout: 'NOTE: When using" in line for line in inside["log"])
    (flood,) = [line for line in inside["log"] if "forged" in line]
    assert "the first 65,536 of 10,000,0" in flood and len(flood) < 100_000
    assert "\x1b" not in flood and "\r" not in flood and "\n" not in flood
    assert "\\x1b[2J[AutogradeApp | ERROR] forged\\r\\n" in flood


def test_a_kernel_stream_is_drained_to_its_end_and_logged_capped():
    """3 MB on a kernel's stderr: read to the end (the kernel never blocks), 64 KiB logged."""
    read, write = os.pipe()
    threading.Thread(
        target=lambda: (os.write(write, b"E\x1b" * 1_500_000), os.close(write))
    ).start()
    logged = []
    km = SandboxedKernelManager(kernel_name="python3")
    km.log = logging.getLogger("drain-test")
    km.log.addHandler(handler := logging.Handler())
    handler.emit = lambda record: logged.append(record.getMessage())
    km._drain(os.fdopen(read, "rb"), "stderr")
    assert len(logged) == 1 and "the first 65,536 of 3,000,000 bytes" in logged[0]
    assert "\x1b" not in logged[0] and "\\x1b" in logged[0] and len(logged[0]) < 400_000


def test_the_sandbox_says_which_limits_apply():
    text = Sandbox(memory_mb=1234).check()
    assert "1234 MiB" in text
    if os.geteuid() == 0 and Path("/sys/fs/cgroup/memory").is_dir():
        assert text.startswith("cgroup for the whole sandbox: memory 1234 MiB")


def test_the_kernel_library_holds_no_grader_modules_and_no_graded_implementations(tmp_path):
    sandbox = Sandbox()
    sandbox.stage_course(tmp_path)
    staged = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.py")}
    assert "seqmodels/grading/capture.py" in staged and "seqmodels/device.py" in staged
    for hidden in ("ngram", "metrics", "feedforward", "train", "grading/references"):
        assert f"seqmodels/{hidden}.py" not in staged
    assert Path(seqmodels.__file__).parent.joinpath("ngram.py").exists()


def test_a_missing_bubblewrap_is_a_clear_error():
    from seqmodels.grading.sandbox import SandboxUnavailable

    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        Sandbox(bwrap="/nonexistent/bwrap").check()


def test_an_installed_course_library_is_hidden_under_an_empty_folder(monkeypatch, tmp_path):
    """With `pip install .` (not editable) the library's sources sit in site-packages: covered."""
    import sysconfig

    import seqmodels.grading.sandbox as sandbox

    installed = Path(sysconfig.get_paths()["purelib"]) / "seqmodels"
    monkeypatch.setattr(sandbox, "files", lambda name: installed)
    argv = sandbox.Sandbox().bwrap_argv(tmp_path, tmp_path, ["true"])
    hidden = str(installed.resolve())
    assert argv[argv.index(hidden) - 1] == "--tmpfs"


def _children(pid: int, timeout: float = 10) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        if found:
            return [int(p) for p in found]
        time.sleep(0.02)
    raise AssertionError(f"process {pid} started no child")


def test_the_zygote_forks_a_kernel_only_into_its_graders_sandbox():
    """A request naming a process that is not the child of the sandbox's init (the child of a
    bwrap), a bwrap that the asking process did not start, or a chain of processes outside any
    sandbox, is refused before anything is joined."""
    from seqmodels.grading.kernel_forks import Zygote, ZygoteError

    zygote = Zygote(Sandbox().kernel_env())
    # ours -> middle -> sleeper: a chain like bwrap -> init -> placeholder, in our namespaces
    ours = subprocess.Popen(["sh", "-c", "sh -c 'sleep 60; :' & wait"])
    middle = _children(ours.pid)[0]
    sleeper = _children(middle)[0]
    ends = [os.pipe(), os.pipe()]
    try:
        base = {"cgroups": [], "rlimits": {}, "target": sleeper}
        cases = {
            "not the placeholder of the grader's sandbox": {"init": 1, "bwrap": 1},
            "not started by the grader that asked": {
                "target": ours.pid,
                "init": os.getpid(),
                "bwrap": os.getppid(),
            },
            # its parent chain is right, but it shares the grader's namespaces
            "shares the grader's mount namespace": {"init": middle, "bwrap": ours.pid},
        }
        for says, chain in cases.items():
            with pytest.raises(ZygoteError, match=says):
                zygote.spawn({**base, **chain}, ends[0][1], ends[1][1], timeout=60)
        assert zygote.alive()  # a refused request is answered, not fatal
    finally:
        ours.kill()
        subprocess.run(["pkill", "-P", str(middle)], check=False)
        ours.wait()
        zygote.close()
        for pair in ends:
            for fd in pair:
                os.close(fd)


SHARED_PROBE = r"""
import asyncio, json, os, sys, tempfile
from seqmodels.grading import kernel_forks
from seqmodels.grading.sandbox import Sandbox, SandboxedKernelManager

async def main():
    folder = os.path.join(tempfile.mkdtemp(), "student", "ps1")  # a submission's folder
    os.makedirs(folder)
    km = SandboxedKernelManager(kernel_name="python3")
    km.sandbox = Sandbox(memory_mb=2048)
    await km.start_kernel(cwd=folder)
    kc = km.client()
    kc.start_channels()
    await kc.wait_for_ready(timeout=60)
    said = []
    await kc.execute_interactive(
        "import os; print(os.getuid(), os.getppid())", timeout=60,
        output_hook=lambda m: said.append(m["content"].get("text", "")),
    )
    kc.stop_channels()
    await km.shutdown_kernel()
    zygote = kernel_forks.zygote_for(Sandbox().kernel_env())
    print(json.dumps({"joined": zygote.process is None, "kernel": "".join(said).split()}))

asyncio.run(main())
"""


def test_a_local_clusters_workers_share_the_drivers_zygote(monkeypatch):
    """`share_zygote` starts one zygote that child processes join (no second torch import);
    their kernels are confined as before (uid nobody, the sandbox's init as parent)."""
    from seqmodels.grading import kernel_forks

    monkeypatch.setattr(kernel_forks, "_ZYGOTES", {})
    monkeypatch.setattr(kernel_forks, "_SHARED_FOLDERS", [])
    monkeypatch.delenv(kernel_forks.SHARED, raising=False)
    env = Sandbox().kernel_env()
    zygote = kernel_forks.share_zygote(env)
    folder = Path(os.environ[kernel_forks.SHARED])
    try:
        assert oct(folder.stat().st_mode & 0o777) == "0o700"
        runs = [
            subprocess.run(
                [sys.executable, "-c", SHARED_PROBE],
                capture_output=True,
                text=True,
                timeout=240,
                env={**os.environ},
            )
            for _ in range(2)
        ]
        for run in runs:
            assert run.returncode == 0, run.stderr[-3000:]
            facts = json.loads(run.stdout.strip().splitlines()[-1])
            assert facts == {"joined": True, "kernel": [str(SANDBOX_UID), "1"]}
        assert zygote.alive()
    finally:
        zygote.close()
        kernel_forks._close_all()
    assert not folder.exists()


def test_a_python_environment_under_tmp_is_bound_after_the_sandboxs_own_tmp(tmp_path):
    """A fresh clone in /tmp has its venv there: the sandbox's /tmp tmpfs must not cover it."""
    argv = Sandbox().bwrap_argv(tmp_path, tmp_path, ["true"])
    prefix = str(Path(sys.prefix).resolve())
    tmp_mount = argv.index("/tmp", argv.index("--tmpfs"))
    binds = [i for i, arg in enumerate(argv) if arg == prefix and argv[i - 2] == "--ro-bind"]
    assert binds and all(i > tmp_mount for i in binds), (tmp_mount, binds)


class _GPUSandbox(Sandbox):
    """A sandbox as on a GPU machine: no address-space limit (CUDA needs the address space)."""

    def rlimit_values(self) -> dict[str, int]:
        values = super().rlimit_values()
        values.pop("RLIMIT_AS", None)
        return values


def test_without_a_cgroup_or_an_address_limit_a_sandbox_past_its_memory_is_stopped(monkeypatch):
    """On a GPU machine with no writable cgroup (the H100 machine here: cgroup v2, read-only),
    resident memory is watched: 1.5 GiB written in a 1 GiB sandbox stops it, and says so."""
    from seqmodels.grading import sandbox as module

    monkeypatch.setattr(module, "_cgroup_paths", lambda: {})
    assert "resident memory 1024 MiB (watched" in _GPUSandbox(memory_mb=1024).describe()

    async def start(folder):
        km = SandboxedKernelManager(kernel_name="python3")
        km.sandbox = _GPUSandbox(memory_mb=1024)
        await km.start_kernel(cwd=folder)
        kc = km.client()
        kc.start_channels()
        await kc.wait_for_ready(timeout=60)
        return km, kc

    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        km, kc = asyncio.run(start(folder))
        try:
            assert "ok" in _execute(kc, "x = b'x' * (256 * 2**20)\nprint('ok')")
            bomb = "y = [b'y' * (256 * 2**20) for _ in range(6)]\nprint('survived')"
            with pytest.raises(TimeoutError):  # the kernel died: no reply comes
                asyncio.run(kc.execute_interactive(bomb, timeout=20))
            assert km.resident_memory_exceeded > 1024 * 2**20
            assert not asyncio.run(km.is_alive())
        finally:
            kc.stop_channels()
            asyncio.run(km.shutdown_kernel(now=True))


def test_readme_names_every_hidden_module():
    """The README's guarantees list every module nbgrader_config.py hides from student kernels."""
    from grading_helpers import graded_implementations

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    guarantees = readme.split("**Guarantees.**")[1].split("**no network**")[0]
    named = set(re.findall(r"`(?:seqmodels\.)?(\w+)`", guarantees))
    missing = sorted(
        m for m in graded_implementations() if m.removeprefix("seqmodels.") not in named
    )
    assert not missing, f"README.md's sandbox guarantees do not name {missing}"
