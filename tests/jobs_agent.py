"""A producer or worker process on a job journal, for the multi-process and kill tests.

    python -m tests.jobs_agent produce DIR TAG KEYS COUNT      puts TAG/k<i % KEYS> = "TAG:<i>"
    python -m tests.jobs_agent work DIR TAG STOPFILE           takes and acks until STOPFILE exists and idle
    python -m tests.jobs_agent work-batch DIR TAG STOPFILE     the same with take_many(4), acking each
                                                               batch in the step that takes the next

Each line on stdout is written only after the call it reports returned (so it is acknowledged):
``put KEY SEQ`` after a put, ``took ID TOKEN KEY PAYLOAD`` after a take, ``acked ID TOKEN`` after
an ack. A kill -9 can cut the last line short; readers ignore a line without its newline.
"""

from __future__ import annotations

import os
import sys

from logspool import jobs


def produce(path: str, tag: str, keys: int, count: int) -> None:
    with jobs.open(path) as journal:
        for i in range(count):
            key = f"{tag}/k{i % keys}"
            journal.put(key, f"{tag}:{i}".encode())
            sys.stdout.write(f"put {key} {i}\n")
            sys.stdout.flush()


def work(path: str, stop: str) -> None:
    with jobs.open(path) as journal:
        for _ in range(1 << 30):
            job = journal.take(lease=float(os.environ.get("LEASE_S", "30")), wait=0.2)
            if not job:
                if os.path.exists(stop):
                    return
                continue
            sys.stdout.write(f"took {job.id} {job.token} {job.key} {job.payload.decode()}\n")
            sys.stdout.flush()
            journal.ack(job)
            sys.stdout.write(f"acked {job.id} {job.token}\n")
            sys.stdout.flush()


def work_batch(path: str, stop: str) -> None:
    with jobs.open(path) as journal:
        done: list[jobs.Job] = []
        for _ in range(1 << 30):
            batch = journal.take_many(4, lease=float(os.environ.get("LEASE_S", "30")), wait=0.2, ack=done)
            for job in done:  # acked by the call that just returned
                sys.stdout.write(f"acked {job.id} {job.token}\n")
            sys.stdout.flush()
            done = []
            if not batch and os.path.exists(stop):
                return
            for job in batch:
                sys.stdout.write(f"took {job.id} {job.token} {job.key} {job.payload.decode()}\n")
                sys.stdout.flush()
                done.append(job)


def parse(out: str) -> list[list[str]]:
    """The complete lines of an agent's output, split into words."""
    lines = out.split("\n")
    return [line.split() for line in lines[:-1] if line]  # the last piece has no newline: cut


if __name__ == "__main__":
    if sys.argv[1] == "produce":
        produce(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif sys.argv[1] == "work-batch":
        work_batch(sys.argv[2], sys.argv[4])
    else:
        work(sys.argv[2], sys.argv[4])
