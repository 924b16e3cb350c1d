"""Where submissions are graded: Dask distributed workers, on this machine or on many.

`open_client(None, jobs)` starts a `LocalCluster` of `jobs` worker processes (one submission at a
time each) on this machine: the default, so a laptop and a cluster take the same code path.
`open_client("tcp://host:8786", ...)` joins a running scheduler whose workers were started with
``dask worker tcp://host:8786 --nthreads 1`` on machines that have the course's virtual
environment, bubblewrap and a copy of the course (see the README).

`grade_everywhere` sends one `seqmodels.grading.worker.grade_submission` task per student, each to
a free worker thread, and hands each outcome to the driver's `record` callback **as it arrives,
once per student**: the driver alone writes the gradebook, the feedback and the grades file. A
submission whose worker died is graded again on another; after ``ALLOWED_FAILURES`` such deaths it
is recorded as one whose grading kept killing its worker, while everyone else is graded.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import CancelledError

from tqdm import tqdm

from .worker import WORKER_IMPORTS, grade_submission

#: how many times a submission may take its worker down before it is given up
ALLOWED_FAILURES = 2
#: seconds to fetch a finished task's outcome from its worker (one that died meanwhile never answers)
RESULT_SECONDS = 30


def open_client(scheduler: str | None, jobs: int):
    """A Dask client: of a running scheduler, or of a new LocalCluster of `jobs` processes."""
    import dask
    from distributed import Client, LocalCluster

    if scheduler:
        return Client(scheduler, timeout="30s")
    from distributed.utils import get_mp_context

    dask.config.set(
        {
            # a grading worker runs subprocesses (the sandboxed kernels): not a daemon
            "distributed.worker.daemon": False,
            # workers are forked from one process that imported the grading modules once
            "distributed.worker.multiprocessing-method": "forkserver",
        }
    )
    get_mp_context().set_forkserver_preload(["distributed", *WORKER_IMPORTS])
    cluster = LocalCluster(
        n_workers=jobs,
        threads_per_worker=1,
        processes=True,
        memory_limit=0,  # the sandbox limits each kernel; the worker itself stays small
        dashboard_address=None,
        silence_logs=logging.ERROR,
        preload=["seqmodels.grading.worker"],  # nbgrader imported while the workers start
    )
    return Client(cluster)


def close_client(client) -> None:
    """Disconnect; a LocalCluster this process started is stopped too."""
    cluster = client.cluster
    client.close()
    if cluster is not None:
        cluster.close()


def killed_worker_note(deaths: int) -> str:
    return (
        "failed: grading this submission stopped its grading worker each time it was tried "
        f"({deaths} times); it was given up so that the others could be graded"
    )


def grade_everywhere(
    client,
    jobs: list[dict],
    template: bytes,
    record: Callable[[dict], None],
    run_seconds: float,
    task: Callable[..., dict] = grade_submission,
    allowed_failures: int = ALLOWED_FAILURES,
) -> dict[str, str]:
    """Grade every job on `client`'s workers; call `record(outcome)` once per student as outcomes
    arrive; return ``{student: "graded" | "failed: why"}``.

    The driver, not Dask's scheduler, decides where each submission goes: it is sent, pinned, to a
    worker thread that is free, so a worker never holds a submission it is not grading. When a
    worker disappears, the one submission it was grading is counted against and queued again
    (first in line); after `allowed_failures` such deaths it is recorded as failed. Every attempt
    is a new task, so Dask's own failure count never decides, and nothing lives on a worker between
    tasks (the template travels with each task) that a worker's death could lose.
    """
    from distributed.scheduler import KilledWorker

    waiting = deque(jobs)
    running: dict = {}  # future -> (job, worker address)
    deaths: Counter[str] = Counter()
    results: dict[str, str] = {}
    run = uuid.uuid4().hex[:8]
    deadline = time.monotonic() + run_seconds

    with tqdm(total=len(jobs), desc="autograde", unit="student") as bar:

        def finish(outcome: dict) -> None:
            student = outcome["student"]
            if student in results:  # pragma: no cover - each job is finished once
                raise RuntimeError(f"{student} came back twice")
            results[student] = outcome["status"]
            record(outcome)
            bar.update()

        def lost(job: dict) -> None:
            deaths[job["student"]] += 1
            if deaths[job["student"]] > allowed_failures:
                finish(failed(job, killed_worker_note(deaths[job["student"]])))
            else:
                waiting.appendleft(job)

        def fetch(job: dict, future) -> dict | str:
            """A finished task's outcome, fetched at once (it lives on its worker until then), or
            "lost" if its worker went first."""
            try:
                return future.result(timeout=RESULT_SECONDS)
            except (KilledWorker, CancelledError, TimeoutError):
                future.cancel()
                return "lost"
            except Exception as error:  # noqa: BLE001 - that student fails; the run goes on
                return failed(job, f"failed: the grading task raised {type(error).__name__}")

        while (waiting or running) and time.monotonic() < deadline:
            ended = [(running.pop(f)[0], f) for f in [f for f in running if f.done()]]
            fetched = [(job, fetch(job, future)) for job, future in ended]
            changed = bool(ended)
            live = client.nthreads()
            for future, (job, address) in list(running.items()):
                if address not in live:  # its worker died while grading it
                    del running[future]
                    future.cancel()
                    lost(job)
                    changed = True
            busy = Counter(address for _, address in running.values())
            for address, threads in live.items():
                while waiting and busy[address] < threads:
                    job = waiting.popleft()
                    attempt = deaths[job["student"]]
                    future = client.submit(
                        task,
                        job,
                        template,
                        key=f"grade-{job['student']}-{run}-{attempt}",
                        workers=[address],
                        allow_other_workers=False,
                        pure=False,
                    )
                    running[future] = (job, address)
                    busy[address] += 1
                    changed = True
            # recorded once the free workers have their next submissions (the driver's writes
            # take a moment; the workers need not wait for them)
            for job, outcome in fetched:
                lost(job) if outcome == "lost" else finish(outcome)
            if not changed:  # until a task ends (then its worker is free at once), 0.2 s at most
                wait_for_one(list(running), 0.2)
        client.cancel(list(running))
        minutes = run_seconds / 60
        for job in [job for job, _ in running.values()] + list(waiting):
            finish(
                failed(job, f"failed: not graded, the run's time limit ({minutes:.0f} min) ran out")
            )
    return results


def wait_for_one(futures: list, seconds: float) -> None:
    """Return when one of `futures` is done, or after `seconds` (a worker's death ends no future:
    the caller looks at the live workers again)."""
    from distributed import wait

    if not futures:
        time.sleep(seconds)
        return
    try:
        wait(futures, timeout=seconds, return_when="FIRST_COMPLETED")
    except TimeoutError:
        pass


def failed(job: dict, status: str) -> dict:
    """The outcome the driver records for a submission that produced none."""
    return {
        "assignment": job["assignment"],
        "student": job["student"],
        "status": status,
        "notebooks": {},
        "feedback": {},
        "gradebook": {"timestamp": None, "notebooks": {}},
        "log": "",
        "seconds": 0.0,
    }
