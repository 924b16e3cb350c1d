"""Everything a sandbox holds is bounded: open files per process and processes in all, so that one
submission cannot fill the host's file table; honest work (a DataLoader with worker processes)
still runs."""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from seqmodels.grading.sandbox import Sandbox, SandboxedKernelManager
from test_kernel_relay import run_cells

pytestmark = pytest.mark.grading

# Fork as many processes as the sandbox allows, each opening files until it may open no more, and
# hold them all a few seconds.
FILL_FILE_TABLE = """
import os, signal, time
children = []
for _ in range(1000):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        held = []
        try:
            while True:
                held.append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            pass
        time.sleep(60)
        os._exit(0)
    children.append(pid)
time.sleep(4)
print(len(children), "children", flush=True)
for pid in children:
    os.kill(pid, signal.SIGKILL)
for pid in children:
    os.waitpid(pid, 0)
"""

HONEST_DATALOADER = """
import torch
from torch.utils.data import DataLoader, TensorDataset
data = TensorDataset(torch.arange(64.0).reshape(32, 2), torch.arange(32))
loader = DataLoader(data, batch_size=4, num_workers=2, persistent_workers=True)
total = sum(float(x.sum()) for _ in range(3) for x, _ in loader)
print("dataloader", total)
"""


def open_files() -> int:
    return int(Path("/proc/sys/fs/file-nr").read_text().split()[0])


@contextmanager
def file_table_growth():
    """``[n]``: by how much the host's file table (``fs.file-nr``) grew at most, sampled every
    50 ms while the block ran (filled in when it ends)."""
    before, peak, stop = open_files(), [0], threading.Event()

    def watch():
        while not stop.is_set():
            peak[0] = max(peak[0], open_files())
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    grew = [0]
    try:
        yield grew
    finally:
        stop.set()
        watcher.join()
        grew[0] = peak[0] - before


@pytest.mark.parametrize("user", ["grader", "ordinary user"])
def test_one_sandbox_cannot_fill_the_hosts_file_table(user):
    with file_table_growth() as grew:
        result = run_cells([[FILL_FILE_TABLE, 60], [HONEST_DATALOADER, 60]], user)
    children = int(result["outputs"][0].split()[0])
    assert 0 < children < Sandbox().max_processes
    assert grew[0] <= 20_000, f"the host's file table grew by {grew[0]:,}"
    assert result["outputs"][1] == f"dataloader {sum(range(64)) * 3.0}\n"  # honest work runs on


# Files held by mappings outlive their descriptors, so RLIMIT_NOFILE does not bound them: 40
# processes mapping 65,530 files each would add 2.6 M entries to the host's file table, past its
# fs.file-max. The sandbox's kernel memory (cgroup) is watched instead.
MAP_FILES = """
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                      ctypes.c_long]
for _ in range(40):
    if os.fork() == 0:
        for _ in range(70_000):
            fd = os.open("/etc/passwd", os.O_RDONLY)
            mapped = libc.mmap(None, 4096, 1, 2, fd, 0)  # PROT_READ, MAP_PRIVATE
            os.close(fd)
            if mapped in (None, ctypes.c_void_p(-1).value):
                break
        time.sleep(60)
        os._exit(0)
time.sleep(30)
print("survived")
"""


def test_files_held_by_mappings_stop_the_sandbox_before_they_fill_the_file_table():
    if os.geteuid() != 0:
        pytest.skip("the sandbox's kernel memory is watched where a cgroup can be made (root)")
    with file_table_growth() as grew:
        result = run_cells([[MAP_FILES, 6]])
    assert result["kernel_memory_exceeded"] > SandboxedKernelManager.kernel_memory_bytes
    assert "survived" not in result["outputs"][0]
    assert grew[0] < 250_000, f"the host's file table grew by {grew[0]:,}"
