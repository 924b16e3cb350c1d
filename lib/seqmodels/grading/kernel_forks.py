"""Kernels forked from a warm zygote: the grader's side of `kernel_zygote.py`.

Starting a kernel cold costs an interpreter, ipykernel and torch: about 2 s of CPU per submission,
more than running most problem sets' code. A `Zygote` is a process (one per grading process and
kernel environment) that has imported them once; each kernel is a fresh fork of it, moved into its
submission's own bubblewrap sandbox (see `kernel_zygote` for how it is confined and checked) and
destroyed with that sandbox. No kernel, and no sandbox, serves two submissions.

`zygote_for(env)` gives this process's zygote for a kernel environment, starting it on first use
(a grading worker calls it as it starts, so that its first kernel need not wait for the imports).
On one machine the workers share one: the grading driver starts it (`share_zygote`) before its
local cluster, listening in a folder of its own (mode 0700, named in ``SEQMODELS_ZYGOTES``), and
each worker connects to it instead of importing torch a second time. The zygote serves only
processes of the grader's user, and forks a kernel only into a sandbox that the asking process
started (its peer credentials say which process that is).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ZYGOTE = Path(__file__).with_name("kernel_zygote.py")
REPLY_BYTES = 1 << 16
SHARED = "SEQMODELS_ZYGOTES"  # the folder of this machine's shared zygotes, one socket each


class ZygoteError(RuntimeError):
    """The zygote could not start, or could not make a confined kernel (the message says why)."""


class Zygote:
    """One zygote process and the socket its requests go over (one request at a time)."""

    def __init__(self, env: dict[str, str], listen: Path | None = None):
        """Start a zygote for kernels with environment `env`; with `listen`, a socket path where
        other processes of this user may connect to it (see `join`)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        passed = [theirs]
        if listen is not None:
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            listener.bind(str(listen))
            listener.listen(64)
            passed.append(listener)
        self.process: subprocess.Popen | None = subprocess.Popen(  # noqa: S603 - our own script
            [sys.executable, "-I", str(ZYGOTE), *(str(s.fileno()) for s in passed)],
            pass_fds=[s.fileno() for s in passed],
            env=env,
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        for each in passed:
            each.close()
        self._socket = ours
        self._lock = threading.Lock()
        self.preload_failed: list[str] | None = None  # None until it has said it is ready

    @classmethod
    def join(cls, path: Path) -> Zygote:
        """This process's connection to a zygote that another started (`share_zygote`)."""
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            connection.connect(str(path))
        except OSError:
            connection.close()
            raise
        zygote = cls.__new__(cls)
        zygote.process, zygote._socket = None, connection
        zygote._lock = threading.Lock()
        zygote.preload_failed = None
        return zygote

    def _receive(self, timeout: float) -> dict:
        self._socket.settimeout(timeout)
        try:
            data = self._socket.recv(REPLY_BYTES)
        except TimeoutError as error:
            raise ZygoteError(f"the kernel zygote did not answer within {timeout:.0f} s") from error
        if not data:
            raise ZygoteError(f"the kernel zygote exited (code {self.process.poll()})")
        return json.loads(data)

    def spawn(self, request: dict, stdout: int, stderr: int, timeout: float = 120) -> None:
        """Fork a kernel into the sandbox `request` describes, with `stdout` and `stderr` (write
        ends of pipes) as its streams; return once it is confined, or raise `ZygoteError`."""
        with self._lock:
            if self.preload_failed is None:
                self.preload_failed = self._receive(timeout).get("preload_failed", [])
            socket.send_fds(self._socket, [json.dumps(request).encode()], [stdout, stderr])
            reply = self._receive(timeout)
        if not reply.get("ok"):
            raise ZygoteError(f"the kernel zygote could not start a kernel: {reply.get('error')}")

    def alive(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        if self._socket.fileno() == -1:
            return False
        with self._lock:  # a joined zygote: alive while its end of the connection is open
            if not select.select([self._socket], [], [], 0)[0]:
                return True
            try:  # readable: its "ready" message, or the end of the connection
                return bool(self._socket.recv(REPLY_BYTES, socket.MSG_PEEK | socket.MSG_DONTWAIT))
            except OSError:
                return False

    def close(self) -> None:
        self._socket.close()  # the zygote exits when its starter's socket closes
        if self.process is None:
            return
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


_ZYGOTES: dict[tuple, Zygote] = {}
_LOCK = threading.Lock()


_SHARED_FOLDERS: list[Path] = []


def _socket_name(env: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(env, sort_keys=True).encode()).hexdigest()[:32] + ".sock"


def zygote_for(env: dict[str, str]) -> Zygote:
    """This process's zygote for kernels with environment `env`: the machine's shared one if the
    driver started one for `env` (``SEQMODELS_ZYGOTES``), else one of its own (started if none
    is alive)."""
    key = tuple(sorted(env.items()))
    with _LOCK:
        zygote = _ZYGOTES.get(key)
        if zygote is None or not zygote.alive():
            if zygote is not None:
                zygote.close()
            zygote = None
            shared = os.environ.get(SHARED)
            if shared and (Path(shared) / _socket_name(env)).exists():
                try:
                    zygote = Zygote.join(Path(shared) / _socket_name(env))
                except OSError:
                    zygote = None  # it has gone: this process starts its own
            _ZYGOTES[key] = zygote or Zygote(env)
        return _ZYGOTES[key]


def share_zygote(env: dict[str, str]) -> Zygote:
    """Start a zygote for `env` that this process's child processes (a local cluster's workers)
    join instead of starting their own: its socket lies in a new folder only this user can enter,
    named in ``SEQMODELS_ZYGOTES`` for the children. It lives as long as this process."""
    folder = Path(tempfile.mkdtemp(prefix="seqmodels-zygotes-"))  # mode 0700
    zygote = Zygote(env, listen=folder / _socket_name(env))
    with _LOCK:
        _ZYGOTES[tuple(sorted(env.items()))] = zygote
        _SHARED_FOLDERS.append(folder)
    os.environ[SHARED] = str(folder)
    return zygote


@atexit.register
def _close_all() -> None:
    with _LOCK:
        for zygote in _ZYGOTES.values():
            zygote.close()
        _ZYGOTES.clear()
        for folder in _SHARED_FOLDERS:
            shutil.rmtree(folder, ignore_errors=True)
        _SHARED_FOLDERS.clear()
