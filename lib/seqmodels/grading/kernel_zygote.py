"""The kernel zygote: a process with ipykernel and torch imported that forks one fresh kernel per
submission into that submission's bubblewrap sandbox. Run as a script, never imported:

    python -I kernel_zygote.py <socket fd> [<listening socket fd>]

It imports nothing of the course (the course library is the graded code) and never runs student
code. Its parent, the grader (`seqmodels.grading.kernel_forks`), sends requests over a Unix
``SOCK_SEQPACKET`` socket: a JSON object and two descriptors, the write ends of the kernel's
stdout and stderr pipes. Given a listening socket too (a path in a folder only the grader's user
can enter), it also serves the grading processes of that user that connect to it, so that the
workers of one machine share one zygote. For each request the zygote forks a child that

1. joins the cgroups of the sandbox and sets its rlimits (``RLIMIT_NPROC``, counted per user
   namespace, only once inside: step 3);
2. checks that the target (``target``) is the placeholder of the requesting grader's own sandbox
   (the child of the child of a bwrap that is the requester's child, as the socket's peer
   credentials name it; held by a pidfd until its namespaces are open) and joins all its namespaces:
   its user namespaces (outer ones first: the others belong to them), cgroup, IPC, UTS, network,
   PID and mount namespaces, so that its root is the sandbox's root and the host's files are out
   of reach;
3. forks again (a process enters a PID namespace only as a child), and that grandchild forks
   once more and exits (the kernel's parent is then the sandbox's init), and the kernel
   - leaves every descriptor behind but its stdio pipes, and starts a session of its own;
   - drops to the sandbox's uid and gid (as root) and drops every capability (bounding,
     ambient, inheritable, permitted, effective);
   - sets ``no_new_privs`` and loads the sandbox's seccomp program (the same BPF bwrap loads);
   - checks all of this from ``/proc/self/status`` and refuses to go on if any is not so;
   - opens the placeholder's FIFO for writing (the sandbox ends when it is closed: when the
     kernel and everything it started have exited) and says "ok" to the zygote;
   - copies the submission into its home and becomes the ipykernel of ``connection``.

A kernel made this way starts in milliseconds instead of seconds (the interpreter, ipykernel and
torch are already in memory), and shares nothing with other students' kernels: a fork is a new
process, the zygote's memory holds only imported third-party modules, and each kernel lives in
the namespaces bwrap made for its submission alone.
"""

import ctypes
import errno
import importlib
import json
import os
import random
import resource
import select
import signal
import socket
import struct
import sys
import tempfile
import traceback

PRELOAD = (
    "ipykernel.kernelapp",
    "ipykernel.ipkernel",
    "IPython.display",
    "torch",
    "safetensors.torch",
    # every problem set calls `seqmodels.device.set_deterministic`, whose
    # `torch.use_deterministic_algorithms` imports TorchInductor, TorchDynamo and SymPy: about 800
    # modules, about 1 s per kernel if each imported them itself (third-party code, no course code)
    "torch._inductor",
)
NAMESPACES = {  # name in /proc/<pid>/ns: CLONE_NEW* flag, in the order they are joined
    "cgroup": 0x02000000,
    "ipc": 0x08000000,
    "uts": 0x04000000,
    "net": 0x40000000,
    "pid": 0x20000000,
    "mnt": 0x00020000,
}
CLONE_NEWUSER = 0x10000000
NS_GET_PARENT = 0xB702  # ioctl: the parent of a user namespace
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 24, 38
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
CAPABILITY_VERSION_3 = 0x20080522
MESSAGE_BYTES = 1 << 20
STATUS_BYTES = 4096

libc = ctypes.CDLL(None, use_errno=True)


def call(result: int, what: str) -> int:
    if result == -1:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return result


class SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]  # fmt: skip


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]


class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]  # fmt: skip


def user_namespaces(target: int) -> list[int]:
    """Descriptors of the user namespaces between ours and the target's, outermost first."""
    mine = os.stat("/proc/self/ns/user").st_ino
    fd = os.open(f"/proc/{target}/ns/user", os.O_RDONLY)
    chain = []
    while os.fstat(fd).st_ino != mine:
        chain.append(fd)
        fd = call(libc.ioctl(fd, NS_GET_PARENT), "the parent of a user namespace")
    os.close(fd)
    return chain[::-1]


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


def enter_sandbox(request: dict, requester: int) -> None:
    """In the zygote's child: the sandbox's cgroups, rlimits and namespaces (steps 1 and 2)."""
    for folder in request["cgroups"]:
        with open(os.path.join(folder, "cgroup.procs"), "w") as procs:
            procs.write(str(os.getpid()))
    for name, value in request["rlimits"].items():
        resource.setrlimit(getattr(resource, name), (value, value))
    # the target is pinned (a pidfd) and must be the child of the sandbox's init, itself the
    # child of the grader's bwrap; it must still be alive once its namespaces are open, so that
    # no other process can have taken its pid meanwhile
    target, init, bwrap = (int(request[key]) for key in ("target", "init", "bwrap"))
    pinned = os.pidfd_open(target)
    if parent_of(target) != init or parent_of(init) != bwrap:
        raise RuntimeError("the target is not the placeholder of the grader's sandbox")
    if parent_of(bwrap) != requester:
        raise RuntimeError("the target's sandbox was not started by the grader that asked")
    users = user_namespaces(target)
    others = []
    for name, flag in NAMESPACES.items():
        if os.stat(f"/proc/{target}/ns/{name}").st_ino != os.stat(f"/proc/self/ns/{name}").st_ino:
            others.append((os.open(f"/proc/{target}/ns/{name}", os.O_RDONLY), flag, name))
    if not any(name == "mnt" for _, _, name in others):
        raise RuntimeError("the target shares the grader's mount namespace: it is not a sandbox")
    if select.select([pinned], [], [], 0)[0]:  # a pidfd is readable once its process has exited
        raise RuntimeError("the sandbox's placeholder exited while the kernel was joining it")
    os.close(pinned)
    # outer user namespaces own the others; the innermost one is joined last (from it, no
    # capability over its parents remains)
    for fd in users[:-1]:
        call(libc.setns(fd, CLONE_NEWUSER), "joining a user namespace")
    for fd, flag, name in others:
        call(libc.setns(fd, flag), f"joining the {name} namespace")
    for fd in users[-1:]:
        call(libc.setns(fd, CLONE_NEWUSER), "joining the innermost user namespace")
    for fd in [*users, *(fd for fd, _, _ in others)]:
        os.close(fd)


def drop_privileges(request: dict) -> None:
    """In the grandchild: the sandbox's uid and gid, no capability, no new privileges, seccomp."""
    last = int(open("/proc/sys/kernel/cap_last_cap").read())
    for cap in range(last + 1):
        call(libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), "dropping the capability bounding set")
    uid, gid = int(request["uid"]), int(request["gid"])
    if os.getuid() != uid or os.getgid() != gid:  # as root: bwrap made no user namespace
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    call(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clearing ambient caps")
    header, data = CapHeader(CAPABILITY_VERSION_3, 0), (CapData * 2)()
    call(libc.capset(ctypes.byref(header), data), "dropping every capability")
    call(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "setting no_new_privs")
    for name, value in request.get("inside_rlimits", {}).items():  # counted in the sandbox now
        resource.setrlimit(getattr(resource, name), (value, value))
    program = bytes.fromhex(request["seccomp"])
    count = len(program) // ctypes.sizeof(SockFilter)
    filters = (SockFilter * count).from_buffer_copy(program)
    fprog = SockFprog(count, ctypes.cast(filters, ctypes.POINTER(SockFilter)))
    call(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "seccomp")


def verify(request: dict, host_root: tuple[int, int]) -> None:
    """Refuse to go on unless the process is confined as the request says."""
    status = {}
    for line in open("/proc/self/status"):
        key, _, value = line.partition(":")
        status[key] = value.split()
    uid, gid = str(request["uid"]), str(request["gid"])
    problems = [
        f"{key} is {status.get(key)}"
        for key, expected in (
            ("Uid", [uid] * 4),
            ("Gid", [gid] * 4),
            ("NoNewPrivs", ["1"]),
            ("Seccomp", ["2"]),
            *((cap, ["0000000000000000"]) for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd")),
        )
        if status.get(key) != expected
    ]
    if status.get("CapAmb", ["0000000000000000"]) != ["0000000000000000"]:
        problems.append(f"CapAmb is {status['CapAmb']}")
    root = os.stat("/")
    if (root.st_dev, root.st_ino) == host_root:
        problems.append("its root is the host's")
    if problems:
        raise RuntimeError("the kernel would not be confined: " + "; ".join(problems))


def open_alive(path: str) -> None:
    """Open the placeholder's FIFO for writing (it ends the sandbox once every writer is gone)."""
    try:
        os.mkfifo(path, 0o600)
    except FileExistsError:
        pass
    for _ in range(6000):  # the placeholder opens its end within milliseconds of starting
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            os.set_blocking(fd, True)
            return
        except OSError as error:
            if error.errno != errno.ENXIO:
                raise
            select.select([], [], [], 0.005)
    raise RuntimeError("the sandbox's placeholder never opened its end of the FIFO")


def become_kernel(request: dict, stdio: list[int], report: int, host_root, said: list) -> None:
    """The grandchild, inside the sandbox (step 3): confined, it reports "ok" and becomes the
    kernel. Returns when the kernel has shut down."""
    if os.fork():  # once more, so that the kernel's parent is the sandbox's init, as when cold
        os._exit(0)  # (the grandchild's parent is outside: its getppid() would be 0)
    os.setsid()
    drop_privileges(request)
    verify(request, host_root)
    null = os.open("/dev/null", os.O_RDONLY)
    for fd, target in ((null, 0), (stdio[0], 1), (stdio[1], 2)):
        os.dup2(fd, target)
    os.closerange(3, report)
    os.closerange(report + 1, 1 << 16)
    open_alive(request["alive"])  # kept open, and inherited by all it starts, while it lives
    os.write(report, b"ok")
    os.close(report)
    said.append(True)
    # nothing of the grader is held from here on: what follows is the kernel's own start
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["home"])
    tempfile.tempdir = None
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.path[:0] = request["path"]
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()
    guard = os.path.join(request["path"][0], "sitecustomize.py")
    with open(guard) as source:
        exec(compile(source.read(), guard, "exec"), {"__name__": "sitecustomize"})
    exec(compile(request["prelude"], "<prelude>", "exec"), {"__name__": "__prelude__"})
    random.seed()  # what a fresh interpreter would have: its own random state
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()
    sys.argv = ["ipykernel_launcher", "-f", request["connection"]]
    from ipykernel import kernelapp

    kernelapp.launch_new_instance(argv=["-f", request["connection"]])


def threads() -> int:
    """The threads of this process (a fork copies one: any other's locks would stay held)."""
    return len(os.listdir("/proc/self/task"))


def spawn(request: dict, stdio: list[int], host_root, requester: int, sockets: list) -> dict:
    """Fork a kernel for `request` from the process `requester`; its answer once confined, or why
    it could not be. `sockets`: every socket object of the zygote (the child detaches them)."""
    if threads() != 1:
        raise RuntimeError(
            f"the zygote has {threads()} threads (an import started one); it forks only when it "
            "has one"
        )
    read, write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:  # the child: enter, then fork the kernel into the PID namespace
        try:
            for each in sockets:  # their descriptors are closed below: no object may use them later
                each.detach()
            os.close(read)
            enter_sandbox(request, requester)
            if os.fork() == 0:
                said: list[bool] = []
                try:
                    become_kernel(request, stdio, write, host_root, said)
                except BaseException:  # noqa: BLE001 - the zygote hears of it until "ok" is said
                    if not said:
                        os.write(write, traceback.format_exc()[-STATUS_BYTES:].encode())
        except BaseException:  # noqa: BLE001 - reported to the zygote
            os.write(write, traceback.format_exc()[-STATUS_BYTES:].encode())
        finally:
            os._exit(0)
    os.close(write)
    said = b""
    try:
        while len(said) < STATUS_BYTES:
            ready, _, _ = select.select([read], [], [], 60)
            if not ready:
                said = b"no answer within 60 s"
                break
            chunk = os.read(read, STATUS_BYTES)
            if not chunk:
                break
            said += chunk
            if said == b"ok":
                break
    finally:
        os.close(read)
        os.waitpid(child, 0)
    if said == b"ok":
        return {"ok": True}
    return {"ok": False, "error": said.decode("utf-8", "replace")[-STATUS_BYTES:]}


def peer(connection: socket.socket) -> tuple[int, int]:
    """The pid and uid of the process at the other end of a Unix socket (as the kernel says)."""
    pid, uid, _ = struct.unpack(
        "3i", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    )
    return pid, uid


def serve(connection: socket.socket, host_root, sockets: list) -> bool:
    """Answer one request on `connection`; False once it has closed."""
    try:
        message, fds, _, _ = socket.recv_fds(connection, MESSAGE_BYTES, 2)
    except InterruptedError:
        return True
    except OSError:
        return False
    if not message:
        return False
    try:
        if len(fds) != 2:
            raise ValueError(f"expected the kernel's stdout and stderr, got {len(fds)} fds")
        reply = spawn(json.loads(message), fds, host_root, peer(connection)[0], sockets)
    except Exception as error:  # noqa: BLE001 - a bad request is answered, not fatal
        reply = {"ok": False, "error": f"{type(error).__name__}: {error}"[:STATUS_BYTES]}
    finally:
        for fd in fds:
            os.close(fd)
    try:
        connection.send(json.dumps(reply).encode())
    except OSError:
        return False
    return True


def main() -> None:
    # it ends when the grader's end of the socket closes, as it does when the grader exits (no
    # PR_SET_PDEATHSIG: that follows the thread that started it, which may end first)
    control = socket.socket(fileno=int(sys.argv[1]))
    listener = socket.socket(fileno=int(sys.argv[2])) if len(sys.argv) > 2 else None
    failed = []
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception as error:  # noqa: BLE001 - reported; the kernel imports it itself
            failed.append(f"{name}: {error!r}"[:200])
    ready = json.dumps({"ready": True, "preload_failed": failed}).encode()
    try:
        control.send(ready)
    except OSError:
        return  # the grader has gone already
    root = os.stat("/")
    host_root = (root.st_dev, root.st_ino)
    clients: list[socket.socket] = []
    while True:
        waiting = [control, *clients, *([listener] if listener else [])]
        try:
            readable, _, _ = select.select(waiting, [], [])
        except InterruptedError:
            continue
        for each in readable:
            if each is listener:
                connection, _ = listener.accept()
                if peer(connection)[1] != os.getuid():  # only the grader's own user
                    connection.close()
                    continue
                try:
                    connection.send(ready)
                    clients.append(connection)
                except OSError:
                    connection.close()
            elif not serve(each, host_root, [control, *clients, *([listener] if listener else [])]):
                if each is control:
                    return  # the grader that started it has gone
                clients.remove(each)
                each.close()


if __name__ == "__main__":
    main()
    os._exit(0)  # nothing to flush or close: skip tearing down torch and the other imports
