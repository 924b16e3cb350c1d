"""The relay between a sandboxed kernel and the grader (`seqmodels.grading.kernel_relay`).

Units: the ZMTP reader forwards whole messages within the limits and discards the rest without
holding it. Attacks, on a real sandboxed kernel: socket files replaced by symlinks to a host socket
reach nothing on the host; one message of 4.4 GB leaves the grader's memory where it was, started
as root and as an ordinary user.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from seqmodels.grading.kernel_relay import MAX_FRAMES, SMALL, MessageReader, ProtocolError
from test_sandbox import _as_ordinary_user

GREETING = b"\xff" + b"\x00" * 8 + b"\x7f" + bytes([3, 1]) + b"NULL" + b"\x00" * 16 + b"\x00" * 32


class Limits:
    """The relay's side of a reader: its limits and the counts it keeps."""

    def __init__(self, max_message=1000, max_cell=5000):
        self.max_message, self.max_cell = max_message, max_cell
        self.forwarded, self.counts = 0, {"oversize": 0, "over_budget": 0}

    def count(self, what):
        self.counts[what] += 1

    def within_budget(self, size):
        return self.forwarded + size <= self.max_cell

    def spend(self, size):
        self.forwarded += size


def frame(body: bytes, more: bool = False, command: bool = False) -> bytes:
    flags = (1 if more else 0) | (4 if command else 0)
    if len(body) > 255:
        return bytes([flags | 2]) + len(body).to_bytes(8, "big") + body
    return bytes([flags, len(body)]) + body


def message(*bodies: bytes) -> bytes:
    return b"".join(frame(b, more=i < len(bodies) - 1) for i, b in enumerate(bodies))


def feed_in_pieces(reader: MessageReader, data: bytes, piece: int) -> bytes:
    out = b""
    for start in range(0, len(data), piece):
        out += b"".join(reader.feed(memoryview(data[start : start + piece])))
        assert len(reader.buffer) <= reader.relay.max_message + piece  # never more held
    return out


@pytest.mark.parametrize("piece", [1, 7, 4096])
def test_whole_messages_pass_unchanged_however_the_bytes_arrive(piece):
    ready = frame(b"\x05READY" + b"x" * 20, command=True)
    stream = GREETING + ready + message(b"id", b"<IDS|MSG>", b"{}") + message(b"y" * 300)
    reader = MessageReader(Limits())
    assert feed_in_pieces(reader, stream, piece) == stream


@pytest.mark.parametrize("piece", [3, 100, 4096])
def test_an_oversize_message_is_discarded_whole_and_the_next_one_passes(piece):
    limits = Limits(max_message=1000)
    small, big = message(b"a", b"b"), message(b"h" * 10, b"x" * 600, b"x" * 600, b"z")
    reader = MessageReader(limits)
    out = feed_in_pieces(reader, GREETING + small + big + small, piece)
    assert out == GREETING + small + small
    assert limits.counts == {"oversize": 1, "over_budget": 0}


def test_past_a_cells_budget_only_small_messages_pass():
    limits = Limits(max_message=SMALL * 4, max_cell=SMALL * 3)
    large, status = message(b"x" * (SMALL + 1)), message(b"status: idle")
    reader = MessageReader(limits)
    out = b"".join(reader.feed(memoryview(GREETING + large * 4 + status)))
    assert out == GREETING + large * 2 + status
    assert limits.counts["over_budget"] == 2


def test_a_huge_frame_is_read_through_without_being_held():
    """A frame announcing 200 MB is discarded as it streams: the reader's buffer stays small."""
    limits = Limits(max_message=2**20)
    reader = MessageReader(limits)
    header = bytes([0x03]) + (200 * 2**20).to_bytes(8, "big")  # long, more
    reader.feed(memoryview(GREETING + header))
    chunk = memoryview(bytes(2**20))
    for _ in range(200):
        assert reader.feed(chunk) == []
        assert len(reader.buffer) == 0
    tail = message(b"end")
    assert b"".join(reader.feed(memoryview(frame(b"") + tail))) == tail
    assert limits.counts["oversize"] == 1


def test_a_message_of_millions_of_empty_frames_is_discarded_not_held():
    """Two bytes a frame stay under the byte cap, but each frame would become an object of its own
    in the grader's ZMQ: past `MAX_FRAMES` the message is discarded, and the reader holds its bytes
    in one buffer, never a list of frames."""
    limits = Limits(max_message=16 * 2**20)
    reader = MessageReader(limits)
    assert reader.feed(memoryview(GREETING)) == [GREETING]
    empty = frame(b"", more=True)
    for _ in range(20):
        assert reader.feed(memoryview(empty * 100_000)) == []
        assert len(reader.message) <= 2 * MAX_FRAMES
    tail = message(b"next")
    assert b"".join(reader.feed(memoryview(frame(b"") + tail))) == tail
    assert limits.counts["oversize"] == 1


@pytest.mark.parametrize(
    "stream",
    [
        b"GET / HTTP/1.1\r\n" + b"x" * 60,  # not ZMTP
        GREETING[:10] + bytes([2]) + GREETING[11:],  # ZMTP 2
        GREETING + bytes([0x80, 1, 0]),  # reserved flag bits
        GREETING + frame(b"x" * (SMALL + 1), command=True),  # a command too large to be one
    ],
)
def test_a_stream_that_is_not_zmtp3_is_refused(stream):
    with pytest.raises(ProtocolError):
        MessageReader(Limits()).feed(memoryview(stream))


KERNEL = """
import asyncio, json, os, sys, tempfile
from seqmodels.grading.sandbox import Sandbox, SandboxedKernelManager

def status(key):
    return int(next(l for l in open("/proc/self/status") if l.startswith(key)).split()[1]) * 1024

async def main(cells):
    km = SandboxedKernelManager(kernel_name="python3")
    km.sandbox = Sandbox(memory_mb=3072)
    result = {"outputs": [], "traffic": []}
    with tempfile.TemporaryDirectory() as folder:
        await km.start_kernel(cwd=folder)
        kc = km.client()
        kc.start_channels()
        await kc.wait_for_ready(timeout=60)
        result["idle_rss"] = status("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # the peak resident size starts again from here
        for code, timeout in cells:
            out = []
            km.relay.new_cell()
            try:
                await kc.execute_interactive(
                    code, timeout=timeout, output_hook=lambda m: out.append(m["content"].get("text", ""))
                )
            except TimeoutError:
                out.append("[timeout]")
            traffic = km.relay.new_cell()
            result["outputs"].append("".join(out))
            result["traffic"].append([traffic.oversize, traffic.over_budget, sorted(traffic.changed)])
        result["peak_rss"] = status("VmHWM")
        result["kernel_memory_exceeded"] = km.kernel_memory_exceeded
        kc.stop_channels()
        await km.shutdown_kernel(now=True)
    print(json.dumps(result))

asyncio.run(main(json.loads(sys.argv[1])))
"""

# One signed IOPub message carrying 22 buffers of 200 MB (ZMQ's cap is per frame, not message).
HUGE_MESSAGE = """
k = get_ipython().kernel
buffer = b"x" * 200_000_000
k.session.send(k.iopub_socket, "display_data", {"data": {"text/plain": "big"}, "metadata": {}},
               parent=k.get_parent("shell"), buffers=[buffer] * 22)
del buffer
print("sent")
"""


def run_cells(cells: list, user: str = "grader") -> dict:
    """Run `cells` (``[code, timeout]``) in one sandboxed kernel, in a fresh grader process: as
    this user, or as the ordinary user of `SEQMODELS_TEST_USER`. What `KERNEL` prints."""
    script = KERNEL.replace("sys.argv[1]", repr(json.dumps(cells)))
    if user != "grader":
        return _as_ordinary_user(script)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.grading
@pytest.mark.parametrize("user", ["grader", "ordinary user"])
def test_one_huge_message_leaves_the_graders_memory_where_it_was(user):
    result = run_cells([[HUGE_MESSAGE, 120], ["print('next cell', 6 * 7)", 30]], user)
    grew = result["peak_rss"] - result["idle_rss"]
    assert grew < 300 * 2**20, f"the grader grew by {grew / 2**20:.0f} MB"
    assert result["outputs"] == ["sent\n", "next cell 42\n"]
    assert result["traffic"][0][0] == 1  # one message discarded, noted for the cell


# The kernel replaces each of its socket files by a symlink to a socket on the host, then closes
# its IOPub socket so that the grader connects again.
REPLACE_SOCKETS = """
import os, time, zmq
k = get_ipython().kernel
print("answered before", flush=True)
time.sleep(0.5)
for name in os.listdir("/run/kernel"):
    if name.startswith("k-"):
        os.unlink("/run/kernel/" + name)
        os.symlink(HOST, "/run/kernel/" + name)
sock = k.iopub_thread.socket
k.iopub_thread.io_loop.add_callback(lambda: sock.close(linger=0))
time.sleep(2)  # the grader connects again meanwhile: every 10 ms
"""


@pytest.mark.grading
def test_socket_files_replaced_by_symlinks_reach_nothing_on_the_host(tmp_path):
    host = tmp_path / "host.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(host))
    listener.listen(64)
    os.chmod(tmp_path, 0o755)
    os.chmod(host, 0o777)
    connections = []

    def count():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                connections.append(listener.accept()[0])
            except OSError:
                pass

    stop = threading.Event()
    counter = threading.Thread(target=count, daemon=True)
    counter.start()
    code = REPLACE_SOCKETS.replace("HOST", repr(str(host)))
    try:
        result = run_cells([[code, 4]])
        time.sleep(1)
    finally:
        stop.set()
        counter.join()
        listener.close()
    assert connections == []
    assert result["outputs"][0].startswith("answered before")  # what it said before counts
    changed = result["traffic"][0][2]
    assert changed and all(name.startswith("k-") for name in changed), changed
