"""Every limit and default of logspool, with its unit and the reason for its value.

Format limits bound what a reader accepts from disk before it allocates anything; defaults are
what a new log gets unless the caller says otherwise (and are then recorded in its meta file).
"""

from __future__ import annotations

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

# --- format limits: a reader rejects anything beyond these -------------------------------------
# The largest payload the format allows. The length field is 32 bits, but a reader must never
# allocate 4 GiB because a corrupt length said so: 256 MiB is far above any sane record.
PAYLOAD_SIZE_LIMIT = 256 * MIB
# The meta file is a small JSON document; anything larger is corrupt.
META_SIZE_MAX = 64 * KIB
# Segment files: a record offset is stored in 64 bits, but we cap segments so that a scan of the
# newest segment (what opening costs) stays bounded.
SEGMENT_SIZE_LIMIT = 4 * GIB

# --- defaults, recorded in the meta file at creation -------------------------------------------
# 64 MiB segments: recovery scans the newest segment on open (~0.1 s at 1 GB/s scan rate), and
# retention works in whole segments, so smaller means finer retention, larger means fewer files.
SEGMENT_SIZE_MAX_DEFAULT = 64 * MIB
SEGMENT_SIZE_MAX_MIN = 4 * KIB
# A sparse index entry at the first record in each 64 KiB of segment: a lookup reads one 1 MiB
# chunk anyway and parses at most 64 KiB of records before its target (~0.1 ms). 4 KiB was tried:
# its index writes dirty a second inode every ~33 records, and every durable append's fsync then
# commits it too: 5% of the "always" rate (benchmarks/RESULTS.md).
INDEX_INTERVAL_DEFAULT = 64 * KIB
INDEX_INTERVAL_MIN = 512
# 16 MiB: larger payloads belong in files, not in a journal record.
RECORD_SIZE_MAX_DEFAULT = 16 * MIB

# zstd compression levels a log may be created with (zstd's own range, negative = faster modes);
# 3 is zstd's default: most of the ratio of higher levels at several times their speed.
ZSTD_LEVEL_MIN = -7
ZSTD_LEVEL_MAX = 22
ZSTD_LEVEL_DEFAULT = 3

# --- runtime bounds -----------------------------------------------------------------------------
# "interval" durability fsyncs at most this often by default (milliseconds): the loss window on
# power failure, while the process lives.
SYNC_INTERVAL_MS_DEFAULT = 100
# Readers read segments in chunks of this many bytes (one pread per chunk).
READ_CHUNK_SIZE = 1 * MIB
# A writer makes the active segment's file this much longer than its records at a time (zeros,
# posix_fallocate), so that a durable append writes in place and its fsync journals no new size.
PREALLOCATE_SIZE = 1 * MIB
# A writer whose appends wait for their fsync (durability "always") writes zeros over this much
# of that preallocated space ahead of its records, each time less than half of it is left: a
# block written before is rewritten in place, where a block first written since posix_fallocate
# (an unwritten extent) costs its fsync a journal commit to convert it. PostgreSQL zero-fills its
# WAL segments for the same reason. An fsync of a 2 KB group commit: 179 -> 139 us; of 4.5 KB:
# 235 -> 161 (benchmarks/RESULTS.md, "Zeros written ahead").
ZERO_AHEAD_SIZE = 128 * KIB
# A writer makes the sync mark (FORMAT.md §8.1), which proves what was fsynced, durable at most
# this long after it raised it (seconds), besides on every clean close and rotation: after a
# power loss, damage to records acknowledged within this window of it may read as a torn tail
# (cut, with a copy in quarantine/); older ones are proven and reported (docs/DURABILITY.md).
SYNC_MARK_PERSIST_S = 1.0
# A reader's first read: smaller, so that the first record of a large log is parsed sooner.
READ_CHUNK_FIRST = 64 * KIB
# A reader's read after it found nothing new (the end of the log): smaller still.
READ_CHUNK_PROBE = 4 * KIB
# How long a writer waits for the writer lock before LockedError (seconds). A writer holds the lock
# only for one write (or one exclusive() block), so a minute means something is stuck.
LOCK_TIMEOUT_S_DEFAULT = 60.0
# When inotify is not available, a waiting reader polls with a backoff between these (seconds).
POLL_INTERVAL_S_MIN = 0.001
POLL_INTERVAL_S_MAX = 0.05
# A wait for a change in a directory polls first: from the first of these (seconds), doubling to
# the second, until the watch has waited WATCH_INOTIFY_AFTER_S in all; only then does it set up
# inotify. Setting up a watch and taking it down cost ~5 and ~15 ms on a VM measured (issue 7):
# more than the short waits most callers make (a group commit's gathering, take(wait=0.01)).
WATCH_POLL_S_MIN = 0.00005
WATCH_POLL_S_FAST = 0.0005
WATCH_INOTIFY_AFTER_S = 0.05
# A writer waiting for a lock with a timeout (flock has none) polls it: from the first of these
# (seconds), doubling to the second for the first LOCK_POLL_FAST_S of the wait (a lock held for one
# decision is freed within milliseconds, and a sleeper that oversleeps leaves it idle), then
# backing off to POLL_INTERVAL_S_MAX (a lock held that long is held by something slow).
LOCK_POLL_S_MIN = 0.00005
LOCK_POLL_S_FAST = 0.001
LOCK_POLL_FAST_S = 1.0
# The longest a durable append's leader waits for the threads its last fsync acknowledged to
# append again (it waits at most the recent cost of an fsync, and never longer than this).
GATHER_WAIT_S_MAX = 0.002
# A group commit waits for other processes' records only when the last one covered at most this
# many (a few concurrent appenders, not batches).
GATHER_RECORDS_MAX = 256
# ... and only on a disk whose fsync lasts at least this (seconds): interpreted processes take
# about as long to append again, so on a faster disk the wait costs more than the fsync it saves
# (measured: 15-20% fewer appends a second on this VM's 40-80 us fsync; docs/DESIGN.md).
GATHER_FSYNC_S_MIN = 0.0002
# Recovery looks this many lsns past a damaged record for later records that prove it was durable.
RECOVERY_RESYNC_LSNS = 64
# Repair looks this many lsns past a damaged record for the first good record after it; damage
# that hides more records than this is treated as reaching the end of its segment.
REPAIR_RESYNC_LSNS = 4096

# A subscriber name: any text up to 1 KiB of UTF-8. Its checkpoint file is named by a hash of it,
# so the limit is for people (lists, messages), not for the file system.
SUBSCRIBER_NAME_SIZE_MAX = 1 * KIB
# At most this many subscribers a log (bounds every listing and retention pass).
SUBSCRIBER_COUNT_MAX = 10_000

# --- the checkpointed file (CheckpointFile) -----------------------------------------------------
# The undo log saves whole blocks: the first change to a block after a checkpoint copies the
# block. 4 KiB is the page size, the unit the kernel writes a mapped file back in. Powers of two
# from 512 (a sector) to 1 MiB (an undo entry is read whole: this bounds that read).
CKPT_BLOCK_SIZE_DEFAULT = 4 * KIB
CKPT_BLOCK_SIZE_MIN = 512
CKPT_BLOCK_SIZE_MAX = 1 * MIB
# The largest file: it is mapped whole, which 64-bit address spaces allow far beyond this; the
# cap keeps a corrupt undo header's data size from being believed.
CKPT_FILE_SIZE_MAX = 1024 * GIB
# Undo entries are written in groups of at most this many bytes (one write, then one fsync).
CKPT_UNDO_WRITE_SIZE_MAX = 4 * MIB
# A rollback reads the file in chunks of this size to check the restored file's CRC.
CKPT_CRC_CHUNK_SIZE = 4 * MIB

# --- the job journal (logspool.jobs) ------------------------------------------------------------
# A job key (UTF-8 bytes) and its domain: keys are URIs or names, not documents; the bound keeps
# every index entry and op record small and is checked before anything is written.
JOB_KEY_SIZE_MAX = 4 * KIB
JOB_DOMAIN_SIZE_MAX = 1 * KIB
# A nack's error text kept with the job (for dead letters): longer text is cut to this many bytes.
JOB_ERROR_SIZE_MAX = 4 * KIB
# Leases, delays and TTLs are bounded so that ns arithmetic stays far inside 64 bits (~30 years).
JOB_DURATION_S_MAX = 1e9
JOB_LEASE_S_DEFAULT = 30.0
# A job that has been delivered this many times and comes back again (nack or lease expiry) goes
# to the dead letters instead. Stored in the journal (a CONFIG op), so every process agrees.
JOB_MAX_DELIVERIES_DEFAULT = 5
JOB_MAX_DELIVERIES_LIMIT = 1_000_000
# Snapshots: one is written when this many ops were applied since the last one AND at least as
# many as twice the live jobs (so the cost of writing one, proportional to the jobs, is spread
# over at least as many ops: amortised O(1) per op).
JOB_SNAPSHOT_OPS_MIN = 50_000
# ... counting as one op every this many bytes of ops folded, when that is more than the ops (a
# batch op, one record, holds thousands of puts): snapshots follow the work an open would redo.
SNAPSHOT_OP_BYTES = 128
# A snapshot file is read whole; larger than this is corrupt (not a journal anyone keeps in RAM).
JOB_SNAPSHOT_SIZE_MAX = 16 * GIB
# The op log's segments: small enough that compaction after a snapshot frees space soon.
JOB_SEGMENT_SIZE_MAX_DEFAULT = 16 * MIB
# A take() looks at most this many stale index entries before it rebuilds the index (bounds the
# loop; stale entries are left by updates and are normally far fewer).
JOB_STALE_ENTRIES_MAX = 1_000_000
# take_many() leases at most this many jobs in one decision (one write; the writer lock is held
# while they are chosen).
JOB_TAKE_MAX = 10_000

# --- the key-value store (logspool.kv) -------------------------------------------------------------
# Longest key, in UTF-8 bytes (a range bound or a regex pattern too).
KV_KEY_SIZE_MAX = 4 * KIB
# Largest value, in bytes (an op holding it must fit a record of the op log).
KV_VALUE_SIZE_MAX = 15 * MIB
# Longest lock owner name, in UTF-8 bytes.
KV_OWNER_SIZE_MAX = 256
# Most keys one range or regex query returns (the seed's 64K).
KV_QUERY_LIMIT_MAX = 65_535
# A regex query stops after this many seconds by default (it then returns a cursor).
KV_MATCH_TIMEOUT_S_DEFAULT = 0.1
# Values at least this large may leave memory when the store is over its memory bound.
KV_COLD_VALUE_MIN = 128
# A snapshot is written after at least this many ops (and twice as many ops as keys).
KV_SNAPSHOT_OPS_MIN = 50_000
# Expired keys removed per write, at most (the rest by the next writes or by expire()).
KV_EXPIRE_BATCH = 64
# LWW tombstones (deleted keys' timestamps) are kept this long after the delete.
KV_TOMBSTONE_S = 3600.0

# --- the command line -------------------------------------------------------------------------------
# A long command's progress line on a terminal is redrawn at most this often.
PROGRESS_REDRAW_S = 0.25

# Holding the writer lock between writes (log/_active.py, "holds"): a handle that writes again
# within WRITER_HOLD_BURST_S of its last write, and found the lock free, keeps the flock of
# DIR/lock after the write instead of giving it back (no flock and no check of the segment's end
# per append while nobody else writes). It gives it back as soon as another writer asks (the
# writer-wanted flag in DIR/sync), after WRITER_HOLD_IDLE_S without a write, or after
# WRITER_HOLD_MAX_S in all (bounding the wait of a writer of an earlier release, which does not ask).
WRITER_HOLD_BURST_S = 0.001
WRITER_HOLD_IDLE_S = 0.001
WRITER_HOLD_MAX_S = 0.05
