"""Where submissions are graded: Dask distributed workers, on this machine or on many.

`open_client(None, jobs)` starts a `LocalCluster` of `jobs` worker processes (one submission at a
time each) on this machine: the default, so a laptop and a cluster take the same code path.
`open_client("tcp://host:8786", ...)` joins a running scheduler whose workers were started with
``dask worker tcp://host:8786 --nthreads 1`` on machines that have the course's virtual
environment, bubblewrap and a copy of the course (see the README).

`grade_everywhere` sends one `seqmodels.grading.worker.grade_submission` task per student and hands
each outcome to the driver's `record` callback **as it arrives, once per student**: the driver alone
writes the gradebook, the feedback and the grades file. Dask gives a task whose worker died to
another worker; after ``allowed_failures`` such deaths the scheduler gives up on it
(``KilledWorker``) and the student is recorded as one whose grading kept killing its worker, while
everyone else is graded.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable

from tqdm import tqdm

from .worker import grade_submission

#: how many times a submission may take its worker down before it is given up (LocalCluster; a
#: running scheduler has its own ``distributed.scheduler.allowed-failures``)
ALLOWED_FAILURES = 2


def open_client(scheduler: str | None, jobs: int, allowed_failures: int = ALLOWED_FAILURES):
    """A Dask client: of a running scheduler, or of a new LocalCluster of `jobs` processes."""
    import dask
    from distributed import Client, LocalCluster

    if scheduler:
        return Client(scheduler, timeout="30s")
    dask.config.set(
        {
            "distributed.scheduler.allowed-failures": allowed_failures,
            # one task per worker thread at a time, the rest wait at the scheduler: a worker that
            # dies takes down (and counts a failure against) only the submission it was grading
            "distributed.scheduler.worker-saturation": 1.0,
            # a grading worker runs subprocesses (the sandboxed kernels): not a daemon
            "distributed.worker.daemon": False,
        }
    )
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


def killed_worker_note(error: BaseException) -> str:
    return (
        "failed: grading this submission stopped its grading worker each time it was tried "
        f"({type(error).__name__}); it was given up so that the others could be graded"
    )


def grade_everywhere(
    client,
    jobs: list[dict],
    template: bytes,
    record: Callable[[dict], None],
    run_seconds: float,
    task: Callable[..., dict] = grade_submission,
) -> dict[str, str]:
    """Grade every job on `client`'s workers; call `record(outcome)` once per student as outcomes
    arrive; return ``{student: "graded" | "failed: why"}``."""
    from concurrent.futures import CancelledError

    from distributed import as_completed
    from distributed.scheduler import KilledWorker

    shared = client.scatter(template, broadcast=True)
    run = uuid.uuid4().hex[:8]
    futures = {
        client.submit(task, job, shared, key=f"grade-{job['student']}-{run}", pure=False): job
        for job in jobs
    }
    results: dict[str, str] = {}
    deadline = time.monotonic() + run_seconds
    arriving = as_completed(futures)
    with tqdm(total=len(futures), desc="autograde", unit="student") as bar:
        while not arriving.is_empty():
            done = arriving.next_batch(block=False)
            if not done:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.2)
                continue
            for future in done:
                job = futures[future]
                try:
                    outcome = future.result()
                except KilledWorker as error:
                    outcome = failed(job, killed_worker_note(error))
                except CancelledError as error:  # the scheduler dropped it after worker deaths
                    outcome = failed(job, killed_worker_note(error))
                except Exception as error:  # noqa: BLE001 - that student fails; the run goes on
                    outcome = failed(job, f"failed: the grading task raised {type(error).__name__}")
                if job["student"] in results:  # pragma: no cover - Dask yields each future once
                    raise RuntimeError(f"{job['student']} came back twice")
                results[job["student"]] = outcome["status"]
                record(outcome)
                bar.update()
        late = [f for f in futures if futures[f]["student"] not in results]
        client.cancel(late)
        for future in late:
            job = futures[future]
            minutes = run_seconds / 60
            outcome = failed(
                job, f"failed: not graded, the run's time limit ({minutes:.0f} min) ran out"
            )
            results[job["student"]] = outcome["status"]
            record(outcome)
            bar.update()
    return results


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
