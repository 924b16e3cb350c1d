"""What a trace window costs a graded call that trains a model (issue 27): time and memory.

A small recurrent language model (embedding 64, GRU 128, vocabulary 500, batches of 32 × 35) is
trained with Adam on one thread, as in the grading sandbox (one core): first for `--seconds`
without a window, counting the steps; then the same number of steps inside a trace window
(`seqmodels.grading.trace_window`: `_lsprof` in every thread, the audit hook, torch's profiler for
TorchScript only), with a tqdm bar, whose monitor thread the window traces too; then again without.
Prints the overhead against the mean of the two plain runs, the resident memory the window added
and the names it kept. ``--old`` also runs the per-case trace the window replaced (torch's autograd
profiler, which keeps every operator event, and a Python profile function) for a tenth of the
steps, to show its memory per step.

    .venv/bin/python benchmarks/trace_overhead.py            # 60 s of training, about 3 minutes
    .venv/bin/python benchmarks/trace_overhead.py --seconds 10 --old
    .venv/bin/python benchmarks/trace_overhead.py --tiny
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

import torch
from tqdm import tqdm

from seqmodels.grading.trace_window import start_window, stop_window


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


class LM(torch.nn.Module):
    def __init__(self, vocab: int = 500, embed: int = 64, hidden: int = 128) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, embed)
        self.rnn = torch.nn.GRU(embed, hidden, batch_first=True)
        self.out = torch.nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.rnn(self.embed(x))[0])


SIZE = {"vocab": 500, "embed": 64, "hidden": 128}


def trainer(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    vocab = SIZE["vocab"]
    data = torch.randint(0, vocab, (64, 36), generator=g)
    model = LM(**SIZE)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(i: int) -> float:
        batch = data[(i * 32) % 64 : (i * 32) % 64 + 32]
        opt.zero_grad()
        logits = model(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, vocab), batch[:, 1:].reshape(-1)
        )
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    return step


def run(steps: int, bar: bool = False) -> float:
    step = trainer()
    start = time.perf_counter()
    for i in tqdm(range(steps), mininterval=1.0, disable=not bar, file=sys.stderr):
        step(i)
    return time.perf_counter() - start


def old_trace(steps: int) -> tuple[float, float]:
    """The per-case trace the window replaced: seconds and resident MB it added."""
    names: set[str] = set()

    def hook(frame, event, arg):
        if event == "call":
            names.add(f"{frame.f_globals.get('__name__')}.{frame.f_code.co_qualname}")

    before = rss_mb()
    profiler = torch.autograd.profiler.profile(use_kineto=False)
    start = time.perf_counter()
    profiler.__enter__()
    sys.setprofile(hook)
    run(steps)
    sys.setprofile(None)
    seconds = time.perf_counter() - start
    grown = rss_mb() - before
    profiler.__exit__(None, None, None)
    return seconds, grown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the plain run")
    parser.add_argument(
        "--old", action="store_true", help="also run the per-case trace it replaced"
    )
    parser.add_argument(
        "--tiny",
        action="store_true",
        help="a tiny model (vocabulary 50, embedding 8, GRU 16): steps of about a millisecond, "
        "where Python's share, and so the profilers', is largest",
    )
    args = parser.parse_args()
    if args.tiny:
        SIZE.update(vocab=50, embed=8, hidden=16)
    torch.set_num_threads(1)
    run(20)  # warm up
    step = trainer()
    start, steps = time.perf_counter(), 0
    while time.perf_counter() - start < args.seconds:
        step(steps)
        steps += 1
    plain = time.perf_counter() - start
    before = rss_mb()
    start_window("benchmark")
    windowed = run(steps, bar=True)
    grown = rss_mb() - before
    record = stop_window()
    again = run(steps)
    base = (plain + again) / 2
    print(f"steps: {steps} ({base / steps * 1e3:.2f} ms a step without the window)")
    print(f"plain: {plain:.1f} s, then {again:.1f} s; in a window: {windowed:.1f} s")
    print(f"overhead: {100 * (windowed / base - 1):+.1f} %")
    print(f"resident memory added while the window was open: {grown:.1f} MB")
    print(
        f"the window kept {len(record['calls'])} call names and {len(record['ops'])} ops "
        f"({len(json.dumps(record)) / 1e3:.0f} kB as JSON) from {record['threads']} threads; "
        f"intact: {record['intact']}, cut: {record['cut']}"
    )
    if args.old:
        few = max(1, steps // 10)
        seconds, added = old_trace(few)
        per_step = base / steps * few
        print(
            f"the per-case trace it replaced, {few} steps: {100 * (seconds / per_step - 1):+.1f} %, "
            f"{added:.0f} MB added ({added / few * 1e3:.0f} kB a step, kept until the case ends)"
        )


if __name__ == "__main__":
    main()
