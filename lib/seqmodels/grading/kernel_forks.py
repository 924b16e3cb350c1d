"""Kernels forked from a warm zygote: the grader's side of `kernel_zygote.py`.

Starting a kernel cold costs an interpreter, ipykernel and torch: about 2 s of CPU per submission,
more than running most problem sets' code. A `Zygote` is a process (one per grading process and
kernel environment) that has imported them once; each kernel is a fresh fork of it, moved into its
submission's own bubblewrap sandbox (see `kernel_zygote` for how it is confined and checked) and
destroyed with that sandbox. No kernel, and no sandbox, serves two submissions.

`zygote_for(env)` gives this process's zygote for a kernel environment, starting it on first use
(a grading worker calls it as it starts, so that its first kernel need not wait for the imports).
"""

from __future__ import annotations

import atexit
import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

ZYGOTE = Path(__file__).with_name("kernel_zygote.py")
REPLY_BYTES = 1 << 16


class ZygoteError(RuntimeError):
    """The zygote could not start, or could not make a confined kernel (the message says why)."""


class Zygote:
    """One zygote process and the socket its requests go over (one request at a time)."""

    def __init__(self, env: dict[str, str]):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.process = subprocess.Popen(  # noqa: S603 - our own script, our own interpreter
            [sys.executable, "-I", str(ZYGOTE), str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            env=env,
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        theirs.close()
        self._socket = ours
        self._lock = threading.Lock()
        self.preload_failed: list[str] | None = None  # None until it has said it is ready

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
        return self.process.poll() is None

    def close(self) -> None:
        self._socket.close()  # the zygote exits when its socket closes
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


_ZYGOTES: dict[tuple, Zygote] = {}
_LOCK = threading.Lock()


def zygote_for(env: dict[str, str]) -> Zygote:
    """This process's zygote for kernels with environment `env` (started if none is alive)."""
    key = tuple(sorted(env.items()))
    with _LOCK:
        zygote = _ZYGOTES.get(key)
        if zygote is None or not zygote.alive():
            zygote = _ZYGOTES[key] = Zygote(env)
        return zygote


@atexit.register
def _close_all() -> None:
    with _LOCK:
        for zygote in _ZYGOTES.values():
            zygote.close()
        _ZYGOTES.clear()
