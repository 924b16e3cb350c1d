"""Between a sandboxed kernel's sockets and the grader's: no path the kernel controls is ever
followed, and no message is held that is larger than the grader will keep.

**No path.** The grader's ZMQ sockets never connect into the sandbox. Each connects to a socket
of this relay in the grader's own private folder; the relay connects onward to the kernel's socket
through a descriptor pinned when that socket first appeared: the sandbox's ``/run/kernel`` is
opened one component at a time from the sandbox's root, refusing symlinks, and the socket in it
with ``O_PATH | O_NOFOLLOW``, only if it is a socket on that same tmpfs. The relay then connects
to ``/proc/self/fd/N``: the pinned inode, with no path resolved again. A kernel that replaces its
socket files (with a symlink to a host socket, say) changes nothing the grader reaches: the relay
keeps talking to the sockets it found, and records that the files were changed.

**Bounded messages.** From the kernel to the grader, the relay reads ZMTP 3 (ZMQ's framing: a
64-byte greeting, then frames, each a flags byte, a 1- or 8-byte length and a body) and forwards
whole messages only. A message whose frames add up to more than `max_message` bytes, or that has
more than `MAX_FRAMES` frames, is discarded as it arrives, never held; once a cell's messages have
used `max_cell` bytes, its later messages are discarded too, except small ones (`SMALL`: the
status and the reply that end a cell). The relay reads from the kernel only while the grader has
taken what it sent before, so at most one message waits in it. Counts of what was discarded are
kept per cell, for the grader's notes. Everything the grader sends to the kernel passes through
unchanged.
"""

from __future__ import annotations

import errno
import os
import selectors
import socket
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path

SMALL = 64 * 2**10  # a message this small always passes (status, execute_reply, a PING)
CHUNK = 2**20  # bytes read at a time
GREETING = 64  # ZMTP 3's greeting
MAX_FRAMES = 1024  # frames of one message (a Jupyter message has a dozen or so, with buffers)
TO_KERNEL_LIMIT = 2**20  # the grader's bytes waiting for the kernel before reading pauses


class ProtocolError(Exception):
    """The kernel's side did not speak ZMTP 3."""


class SocketFilesChanged(Exception):
    """A kernel socket's file is no longer the socket that was pinned (or never was one)."""


class KernelSockets:
    """The sandbox's ``/run/kernel`` folder, reached from the root of the sandbox's process `init`
    one component at a time (no symlink followed), and the sockets in it, pinned by descriptor."""

    def __init__(self, init: int, folder: str = "/run/kernel"):
        flags = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(f"/proc/{init}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in Path(folder).relative_to("/").parts:
                inner = os.open(part, flags, dir_fd=fd)
                os.close(fd)
                fd = inner
        except OSError:
            os.close(fd)
            raise
        self.fd = fd
        self.device = os.fstat(fd).st_dev
        self.pinned: dict[str, int] = {}

    def _lookup(self, name: str) -> int:
        """A new O_PATH descriptor of `name` in the folder (the name itself, were it a symlink)."""
        if "/" in name or name in ("", ".", ".."):
            raise ValueError(f"expected a file name, got {name!r}")
        return os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.fd)

    def pin(self, name: str) -> int:
        """The pinned descriptor of socket `name`, pinned now if it was not: `FileNotFoundError`
        while it does not exist yet, `SocketFilesChanged` if it is not a socket of this tmpfs."""
        if name in self.pinned:
            return self.pinned[name]
        fd = self._lookup(name)
        info = os.fstat(fd)
        if not stat.S_ISSOCK(info.st_mode) or info.st_dev != self.device:
            os.close(fd)
            raise SocketFilesChanged(f"{name} is not a socket of the kernel's folder")
        self.pinned[name] = fd
        return fd

    def unchanged(self, name: str) -> bool:
        """Whether `name` still names the socket that was pinned."""
        try:
            fd = self._lookup(name)
        except OSError:
            return False
        try:
            now, then = os.fstat(fd), os.fstat(self.pinned[name])
            return (now.st_dev, now.st_ino) == (then.st_dev, then.st_ino)
        finally:
            os.close(fd)

    def close(self) -> None:
        for fd in [self.fd, *self.pinned.values()]:
            os.close(fd)
        self.pinned.clear()


@dataclass
class CellTraffic:
    """What the kernel sent during one cell, and what of it the relay discarded."""

    forwarded: int = 0  # bytes of whole messages passed on
    oversize: int = 0  # messages over `max_message`, discarded
    over_budget: int = 0  # messages past the cell's `max_cell`, discarded
    garbled: int = 0  # connections closed for not speaking ZMTP 3
    changed: set[str] = field(default_factory=set)  # socket files the kernel replaced


class MessageReader:
    """Splits one ZMTP 3 stream from the kernel into what is forwarded: the greeting's bytes,
    commands, and whole messages within the limits; discards the rest as it arrives."""

    def __init__(self, relay: Relay):
        self.relay = relay
        self.buffer = bytearray()
        self.greeted = 0  # greeting bytes seen
        self.message = bytearray()  # the message in progress, frames with their headers
        self.frames = 0  # frames in it
        self.size = 0
        self.skip = 0  # bytes of a discarded frame still to read
        self.skipping = False  # discarding the rest of a message
        self.last = False  # the frame being discarded ends its message

    def feed(self, data: memoryview) -> list[bytes]:
        """Take the bytes read; return the units to forward, in order."""
        if self.skip and not self.buffer:  # discard straight from what was read
            taken = min(self.skip, len(data))
            self.skip -= taken
            data = data[taken:]
            if not self.skip:
                self._frame_discarded()
        out: list[bytes] = []
        if self.greeted < GREETING and data:
            taken = min(GREETING - self.greeted, len(data))
            head = bytes(data[:taken])
            if self.greeted == 0 and head[:1] != b"\xff":
                raise ProtocolError("the kernel's socket does not speak ZMTP")
            if self.greeted <= 10 < self.greeted + taken and head[10 - self.greeted] < 3:
                raise ProtocolError("the kernel's socket speaks a ZMTP older than 3")
            self.greeted += taken
            out.append(head)
            data = data[taken:]
        self.buffer += data
        while self._step(out):
            pass
        return out

    def _frame_discarded(self) -> None:
        if self.last:
            self.skipping = False

    def _step(self, out: list[bytes]) -> bool:
        """Parse one unit from the buffer into `out`; False when more bytes are needed."""
        buffer = self.buffer
        if self.skip:
            taken = min(self.skip, len(buffer))
            del buffer[:taken]
            self.skip -= taken
            if self.skip:
                return False
            self._frame_discarded()
        if len(buffer) < 2:
            return False
        flags = buffer[0]
        if flags & ~0x07:
            raise ProtocolError(f"a frame with reserved flags set ({flags:#x})")
        head = 9 if flags & 0x02 else 2
        if len(buffer) < head:
            return False
        size = int.from_bytes(buffer[1:head], "big")
        more, command = bool(flags & 0x01), bool(flags & 0x04)
        if command:
            if size > SMALL:
                raise ProtocolError(f"a command of {size:,} bytes")
            if len(buffer) < head + size:
                return False
            if self.frames:  # between a message's frames: it goes with the message
                self.message += buffer[: head + size]
            else:
                out.append(bytes(buffer[: head + size]))
            del buffer[: head + size]
            return True
        total = self.size + head + size
        if not self.skipping and (total > self.relay.max_message or self.frames >= MAX_FRAMES):
            self.relay.count("oversize")
            self.skipping = True
        elif not self.skipping and total > SMALL and not self.relay.within_budget(total):
            self.relay.count("over_budget")
            self.skipping = True
        if self.skipping:
            self.message, self.frames, self.size = bytearray(), 0, 0
            del buffer[:head]
            self.skip, self.last = size, not more
            if not size:
                self._frame_discarded()
            return True
        if len(buffer) < head + size:
            return False
        self.message += buffer[: head + size]
        self.frames += 1
        del buffer[: head + size]
        self.size = total
        if not more:
            out.append(bytes(self.message))
            self.relay.spend(self.size)
            self.message, self.frames, self.size = bytearray(), 0, 0
        return True


class Link:
    """One connection of the grader's, joined to one of the kernel's sockets."""

    def __init__(self, relay: Relay, name: str, grader: socket.socket, kernel: socket.socket):
        self.relay, self.name = relay, name
        self.grader, self.kernel = grader, kernel
        self.reader = MessageReader(relay)
        self.to_grader = bytearray()
        self.to_kernel = bytearray()
        self.kernel_open = True

    def close(self) -> None:
        for sock in (self.grader, self.kernel):
            try:
                self.relay.selector.unregister(sock)
            except (KeyError, ValueError):
                pass
            sock.close()


class Relay:
    """The relay of one sandboxed kernel: a socket per channel in `folder` (named as the kernel's
    are, ``k-<port>``), joined to the kernel's through `sockets`; one thread serves them all."""

    def __init__(
        self,
        folder: Path,
        sockets: KernelSockets,
        names: list[str],
        max_message: int = 16 * 2**20,
        max_cell: int = 64 * 2**20,
    ):
        self.sockets, self.max_message, self.max_cell = sockets, max_message, max_cell
        self.selector = selectors.DefaultSelector()
        self.links: dict[socket.socket, Link] = {}
        self.listeners: dict[socket.socket, str] = {}
        self._lock = threading.Lock()
        self._cell = CellTraffic()
        self._changed: set[str] = set()
        folder.mkdir(mode=0o700, exist_ok=True)
        for name in names:
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(str(folder / name))
            listener.listen(8)
            listener.setblocking(False)
            self.listeners[listener] = name
            self.selector.register(listener, selectors.EVENT_READ)
        self._wake_read, self._wake_write = os.pipe()
        self.selector.register(self._wake_read, selectors.EVENT_READ)
        self._scratch = bytearray(CHUNK)
        self._thread = threading.Thread(target=self._serve, name="kernel-relay", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ per cell
    def new_cell(self) -> CellTraffic:
        """Start counting a new cell's traffic; return the last cell's, with every socket file
        the kernel has replaced since it was pinned."""
        for name in list(self.sockets.pinned):
            if name not in self.changed and not self.sockets.unchanged(name):
                self._socket_changed(name)
        with self._lock:
            last, self._cell = self._cell, CellTraffic()
        return last

    def count(self, what: str) -> None:
        with self._lock:
            setattr(self._cell, what, getattr(self._cell, what) + 1)

    def within_budget(self, size: int) -> bool:
        with self._lock:
            return self._cell.forwarded + size <= self.max_cell

    def spend(self, size: int) -> None:
        with self._lock:
            self._cell.forwarded += size

    def _socket_changed(self, name: str) -> None:
        with self._lock:
            self._cell.changed.add(name)
            self._changed.add(name)

    @property
    def changed(self) -> set[str]:
        """Every socket file the kernel replaced, over the whole run."""
        with self._lock:
            return set(self._changed)

    # ------------------------------------------------------------------ the loop
    def close(self) -> None:
        if self._thread.is_alive():
            os.write(self._wake_write, b"x")
            self._thread.join(timeout=5)
        for sock in list(self.listeners):
            sock.close()
        for link in list(self.links.values()):
            link.close()
        self.links.clear()
        self.selector.close()
        os.close(self._wake_read)
        os.close(self._wake_write)
        self.sockets.close()

    def _serve(self) -> None:
        while True:
            for key, events in self.selector.select():
                if key.fileobj == self._wake_read:
                    return
                sock = key.fileobj
                try:
                    if sock in self.listeners:
                        self._accept(sock)
                    elif sock in self.links:
                        self._service(self.links[sock], sock, events)
                except Exception:  # noqa: BLE001 - one broken connection never ends the relay
                    if sock in self.links:
                        self._drop(self.links[sock])

    def _accept(self, listener: socket.socket) -> None:
        name = self.listeners[listener]
        try:
            grader, _ = listener.accept()
        except BlockingIOError:
            return
        kernel = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            fd = self.sockets.pin(name)
            kernel.settimeout(1.0)
            kernel.connect(f"/proc/self/fd/{fd}")
        except (OSError, SocketFilesChanged) as error:
            kernel.close()
            grader.close()  # ZMQ connects again shortly
            pinned = name in self.sockets.pinned
            if isinstance(error, SocketFilesChanged) or (
                pinned and not self.sockets.unchanged(name)
            ):
                self._socket_changed(name)
            return
        for sock in (grader, kernel):
            sock.setblocking(False)
        link = Link(self, name, grader, kernel)
        self.links[grader] = self.links[kernel] = link
        self._watch(link)

    def _watch(self, link: Link) -> None:
        """Register what each side of `link` waits for: read while the other side keeps up."""
        wants = {
            link.grader: (selectors.EVENT_READ if len(link.to_kernel) < TO_KERNEL_LIMIT else 0)
            | (selectors.EVENT_WRITE if link.to_grader else 0),
            link.kernel: (
                selectors.EVENT_READ
                if link.kernel_open and len(link.to_grader) < self.max_message
                else 0
            )
            | (selectors.EVENT_WRITE if link.to_kernel and link.kernel_open else 0),
        }
        for sock, events in wants.items():
            registered = self._registered(sock)
            if events and registered:
                self.selector.modify(sock, events)
            elif events:
                self.selector.register(sock, events)
            elif registered:
                self.selector.unregister(sock)

    def _registered(self, sock: socket.socket) -> bool:
        try:
            self.selector.get_key(sock)
            return True
        except (KeyError, ValueError):
            return False

    def _drop(self, link: Link) -> None:
        self.links.pop(link.grader, None)
        self.links.pop(link.kernel, None)
        link.close()
        if link.name in self.sockets.pinned and not self.sockets.unchanged(link.name):
            self._socket_changed(link.name)

    def _service(self, link: Link, sock: socket.socket, events: int) -> None:
        try:
            if sock is link.kernel and events & selectors.EVENT_READ:
                count = sock.recv_into(self._scratch)
                if not count:
                    link.kernel_open = False
                else:
                    for unit in link.reader.feed(memoryview(self._scratch)[:count]):
                        link.to_grader += unit
            if sock is link.grader and events & selectors.EVENT_READ:
                data = sock.recv(CHUNK)
                if not data:
                    return self._drop(link)
                link.to_kernel += data
            for target, pending in ((link.grader, link.to_grader), (link.kernel, link.to_kernel)):
                if pending and (target is link.grader or link.kernel_open):
                    try:
                        sent = target.send(pending)
                        del pending[:sent]
                    except BlockingIOError:
                        pass
        except ProtocolError:
            self.count("garbled")
            return self._drop(link)
        except OSError as error:
            if error.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                return self._drop(link)
        if not link.kernel_open and not link.to_grader:
            return self._drop(link)  # the kernel closed this socket: the grader reconnects
        self._watch(link)
