"""The job journal: a frontend records that a resource needs work; workers take the next job.

::

    from logspool import jobs
    with jobs.open("crawl") as journal:
        journal.put("https://example.com/a", b"refresh", priority=10, delay=5)
        job = journal.take(lease=30)          # a Job, or Idle (falsy) with .next_at
        if job:
            ...
            journal.ack(job)
        for job in journal.work(lease=30, idle_timeout=1):   # acks each job when the next is asked
            ...

Embedded and multi-process: every process that opens the directory shares the same jobs (the
state is a fold over an op log; see docs/JOBS.md). Durable by default: calls return after fsync.
"""

from ._journal import Idle, Job, JobStats, Journal, Work, domain_of, open

__all__ = ["Idle", "Job", "JobStats", "Journal", "Work", "domain_of", "open"]
