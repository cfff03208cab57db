package logspool.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.sql.Timestamp;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.zip.CRC32;

import org.apache.spark.sql.sources.And;
import org.apache.spark.sql.sources.EqualNullSafe;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.IsNotNull;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;
import org.apache.spark.sql.sources.Or;

/**
 * Filters on {@code lsn} and {@code timestamp} pushed down to the planned ranges, through the
 * segments' indexes (docs/FORMAT.md §5), in the driver.
 *
 * <p>A filter becomes a set of lsns, kept as sorted disjoint intervals [lo, hi). On {@code lsn}
 * the set is exact: the ranges are cut to it and Spark need not check the filter again. On
 * {@code timestamp} it is a superset found from index entries alone (no record is read): the
 * records before the last entry older than the bound are older still, the records from the first
 * entry at or past the upper bound are later still, because timestamps never decrease along a log
 * (FORMAT.md §4.2); Spark checks such filters again on the rows read, so even a log whose
 * timestamps do decrease (damage, which verify reports) never yields a row the filter excludes.
 * Spark's timestamps are microseconds; a record's is its nanoseconds truncated, so
 * {@code timestamp >= T} holds exactly for nanoseconds at or past T * 1000.
 */
final class Pushdown {
    static final int EXACT = 0;
    static final int SUPERSET = 1;
    static final int UNSUPPORTED = 2;
    /** An IN list of more lsn runs than this is cut to its hull (one range, not one per run). */
    static final int RUNS_MAX = 64;
    static final long END = Long.MAX_VALUE;  // "no upper bound" (lsns are below 2^63)
    static final long[] ALL = {0, END};
    static final long[] NONE = {};

    private Pushdown() {
    }

    /** What pushing ``f`` gives: an exact lsn set, a superset, or nothing. */
    static int kind(Filter f) {
        if (f instanceof And a) {
            int left = kind(a.left());
            int right = kind(a.right());
            if (left == UNSUPPORTED && right == UNSUPPORTED) {
                return UNSUPPORTED;
            }
            return left == UNSUPPORTED || right == UNSUPPORTED ? SUPERSET : Math.max(left, right);
        }
        if (f instanceof Or o) {
            return Math.max(kind(o.left()), kind(o.right()));
        }
        if (f instanceof IsNotNull n) {  // every column of a log is non-null
            return LogspoolJvmSource.FULL_SCHEMA.getFieldIndex(n.attribute()).isDefined() ? EXACT : UNSUPPORTED;
        }
        String column = attribute(f);
        Object[] values = values(f);
        if (column == null || values == null) {
            return UNSUPPORTED;
        }
        if (column.equals("lsn")) {
            for (Object v : values) {
                if (!(v instanceof Long || v instanceof Integer || v instanceof Short || v instanceof Byte)) {
                    return UNSUPPORTED;
                }
            }
            return f instanceof In && runs(sortedLongs(values)) > RUNS_MAX ? SUPERSET : EXACT;
        }
        if (column.equals("timestamp")) {
            for (Object v : values) {
                if (!(v instanceof Timestamp || v instanceof Instant)) {
                    return UNSUPPORTED;
                }
            }
            return SUPERSET;
        }
        return UNSUPPORTED;
    }

    private static String attribute(Filter f) {
        if (f instanceof EqualTo x) {
            return x.attribute();
        } else if (f instanceof EqualNullSafe x) {
            return x.attribute();
        } else if (f instanceof GreaterThan x) {
            return x.attribute();
        } else if (f instanceof GreaterThanOrEqual x) {
            return x.attribute();
        } else if (f instanceof LessThan x) {
            return x.attribute();
        } else if (f instanceof LessThanOrEqual x) {
            return x.attribute();
        } else if (f instanceof In x) {
            return x.attribute();
        }
        return null;
    }

    private static Object[] values(Filter f) {
        if (f instanceof EqualTo x) {
            return new Object[] {x.value()};
        } else if (f instanceof EqualNullSafe x) {
            return new Object[] {x.value()};
        } else if (f instanceof GreaterThan x) {
            return new Object[] {x.value()};
        } else if (f instanceof GreaterThanOrEqual x) {
            return new Object[] {x.value()};
        } else if (f instanceof LessThan x) {
            return new Object[] {x.value()};
        } else if (f instanceof LessThanOrEqual x) {
            return new Object[] {x.value()};
        } else if (f instanceof In x) {
            return x.values().length == 0 ? null : x.values();
        }
        return null;
    }

    /** The lsns ``f`` may hold, for a filter {@link #kind} did not call UNSUPPORTED. */
    static long[] lsns(Filter f, Index index) throws IOException {
        if (f instanceof And a) {
            long[] left = kind(a.left()) == UNSUPPORTED ? ALL : lsns(a.left(), index);
            long[] right = kind(a.right()) == UNSUPPORTED ? ALL : lsns(a.right(), index);
            return intersect(left, right);
        }
        if (f instanceof Or o) {
            return union(lsns(o.left(), index), lsns(o.right(), index));
        }
        if (f instanceof IsNotNull) {
            return ALL;
        }
        String column = attribute(f);
        Object[] values = values(f);
        if (column.equals("lsn")) {
            long[] v = sortedLongs(values);
            if (f instanceof In) {
                return runs(v) > RUNS_MAX ? interval(v[0], plusOne(v[v.length - 1])) : points(v);
            }
            return bounds(f, v[0], 0, END);
        }
        long[] micros = new long[values.length];
        for (int i = 0; i < values.length; i++) {
            micros[i] = micros(values[i]);
        }
        Arrays.sort(micros);
        if (f instanceof In && micros.length > RUNS_MAX) {
            return index.lsnsBetween(nanos(micros[0]), nanos(plusOne(micros[micros.length - 1])));
        }
        if (f instanceof In) {
            long[] out = NONE;
            for (long t : micros) {
                out = union(out, index.lsnsBetween(nanos(t), nanos(plusOne(t))));
            }
            return out;
        }
        long[] ns = bounds(f, micros[0], Long.MIN_VALUE, END);
        return ns.length == 0 ? NONE : index.lsnsBetween(nanos(ns[0]), nanos(ns[1]));
    }

    /** The interval of ``v`` a comparison keeps, within [lo, END). */
    private static long[] bounds(Filter f, long v, long lo, long end) {
        if (f instanceof EqualTo || f instanceof EqualNullSafe) {
            return interval(Math.max(v, lo), v < lo ? lo : plusOne(v));
        } else if (f instanceof GreaterThan) {
            return interval(Math.max(plusOne(v), lo), end);
        } else if (f instanceof GreaterThanOrEqual) {
            return interval(Math.max(v, lo), end);
        } else if (f instanceof LessThan) {
            return interval(lo, v);
        }
        return interval(lo, plusOne(v));  // LessThanOrEqual
    }

    private static long plusOne(long v) {
        return v == END ? END : v + 1;
    }

    private static long[] interval(long lo, long hi) {
        return lo < hi ? new long[] {lo, hi} : NONE;
    }

    private static long[] sortedLongs(Object[] values) {
        long[] out = new long[values.length];
        for (int i = 0; i < values.length; i++) {
            out[i] = ((Number) values[i]).longValue();
        }
        Arrays.sort(out);
        return out;
    }

    private static int runs(long[] sorted) {
        int n = 0;
        for (int i = 0; i < sorted.length; i++) {
            if (i == 0 || sorted[i] > sorted[i - 1] + 1) {
                n++;
            }
        }
        return n;
    }

    private static long[] points(long[] sorted) {
        long[] out = NONE;
        for (long v : sorted) {
            if (v >= 0) {
                out = union(out, interval(v, plusOne(v)));
            }
        }
        return out;
    }

    /** Microseconds since the epoch of a pushed timestamp (java.sql.Timestamp, or Instant with
     * spark.sql.datetime.java8API.enabled). */
    private static long micros(Object v) {
        long seconds;
        long nanos;
        if (v instanceof Instant i) {
            seconds = i.getEpochSecond();
            nanos = i.getNano();
        } else {
            Timestamp t = (Timestamp) v;
            seconds = Math.floorDiv(t.getTime(), 1000L);
            nanos = t.getNanos();
        }
        try {
            return Math.addExact(Math.multiplyExact(seconds, 1_000_000L), nanos / 1000);
        } catch (ArithmeticException e) {
            return seconds < 0 ? Long.MIN_VALUE : END;  // beyond any record either way
        }
    }

    /** The record nanoseconds at which Spark's microseconds reach ``micros``: 0 for any time up
     * to the epoch (no record is earlier), END for any past 2^63 ns. */
    private static long nanos(long micros) {
        if (micros <= 0) {
            return 0;
        }
        return micros >= END / 1000 ? END : micros * 1000;
    }

    static long[] intersect(long[] a, long[] b) {
        List<Long> out = new ArrayList<>();
        int i = 0;
        int j = 0;
        while (i < a.length && j < b.length) {
            long lo = Math.max(a[i], b[j]);
            long hi = Math.min(a[i + 1], b[j + 1]);
            if (lo < hi) {
                out.add(lo);
                out.add(hi);
            }
            if (a[i + 1] < b[j + 1]) {
                i += 2;
            } else {
                j += 2;
            }
        }
        return toArray(out);
    }

    static long[] union(long[] a, long[] b) {
        long[][] all = new long[(a.length + b.length) / 2][];
        int n = 0;
        for (int i = 0; i < a.length; i += 2) {
            all[n++] = new long[] {a[i], a[i + 1]};
        }
        for (int i = 0; i < b.length; i += 2) {
            all[n++] = new long[] {b[i], b[i + 1]};
        }
        Arrays.sort(all, (x, y) -> Long.compare(x[0], y[0]));
        List<Long> out = new ArrayList<>();
        for (long[] r : all) {
            int last = out.size() - 1;
            if (last > 0 && r[0] <= out.get(last)) {
                out.set(last, Math.max(out.get(last), r[1]));
            } else {
                out.add(r[0]);
                out.add(r[1]);
            }
        }
        return toArray(out);
    }

    private static long[] toArray(List<Long> list) {
        long[] out = new long[list.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = list.get(i);
        }
        return out;
    }

    /**
     * The planned ranges cut to the lsns every pushed filter may hold (their AND), each starting
     * at the last index entry at or before its first lsn (so a task parses from there, not from
     * where the unfiltered range began). A range the filters exclude is not read at all.
     */
    static LogspoolJvmSource.Range[] narrow(String dir, long[][] ranges, Filter[] pushed) throws IOException {
        LogspoolJvmSource.Range[] planned = new LogspoolJvmSource.Range[ranges.length];
        for (int i = 0; i < planned.length; i++) {
            planned[i] = new LogspoolJvmSource.Range(ranges[i]);
        }
        if (pushed.length == 0) {
            return planned;
        }
        Index index = new Index(dir, planned);
        long[] keep = ALL;
        for (Filter f : pushed) {
            keep = intersect(keep, lsns(f, index));
        }
        List<LogspoolJvmSource.Range> out = new ArrayList<>();
        for (LogspoolJvmSource.Range r : planned) {
            for (int i = 0; i < keep.length; i += 2) {
                long lo = Math.max(r.start, keep[i]);
                long hi = Math.min(r.end, keep[i + 1]);
                if (lo >= hi) {
                    continue;
                }
                long offset = r.offset;
                long offsetLsn = r.offsetLsn;
                long[] entry = index.entryAtOrBefore(r.base, lo);
                if (entry != null && entry[0] > offsetLsn) {
                    offsetLsn = entry[0];
                    offset = entry[2];
                }
                long bytes = r.bytes * (hi - lo) / Math.max(1, r.end - r.start);  // (its share of the lsns)
                out.add(new LogspoolJvmSource.Range(new long[] {r.base, offset, offsetLsn, lo, hi, bytes}));
            }
        }
        return out.toArray(new LogspoolJvmSource.Range[0]);
    }

    /** The index entries of the planned segments, read as docs/FORMAT.md §5 says: never trusted
     * blindly (the reader checks the record an entry names), a bad one ends the list, a missing
     * or bad index is an empty one (derived data). */
    static final class Index {
        static final int HEADER_SIZE = 32;
        static final int ENTRY_SIZE = 32;
        static final byte[] MAGIC = "LOGSPIDX".getBytes(StandardCharsets.US_ASCII);
        private final Map<Long, long[][]> bySegment = new HashMap<>();
        private final long[][] all;  // every entry {lsn, timestamp, offset}, in lsn order

        Index(String dir, LogspoolJvmSource.Range[] ranges) throws IOException {
            List<long[]> everything = new ArrayList<>();
            long[] bases = Arrays.stream(ranges).mapToLong(r -> r.base).distinct().sorted().toArray();
            for (long base : bases) {
                long[][] entries = read(Path.of(dir, LogspoolJvmSource.indexName(base)), base);
                bySegment.put(base, entries);
                everything.addAll(Arrays.asList(entries));
            }
            all = everything.toArray(new long[0][]);
        }

        static long[][] read(Path path, long base) throws IOException {
            byte[] raw;
            try {
                raw = Files.readAllBytes(path);
            } catch (NoSuchFileException e) {
                return new long[0][];
            }
            ByteBuffer b = ByteBuffer.wrap(raw).order(ByteOrder.LITTLE_ENDIAN);
            CRC32 crc = new CRC32();
            if (raw.length < HEADER_SIZE || !Arrays.equals(raw, 0, 8, MAGIC, 0, 8) || b.getShort(8) != 1
                    || b.getShort(10) != HEADER_SIZE || b.getLong(16) != base) {
                return new long[0][];
            }
            crc.update(raw, 0, 28);
            if (crc.getValue() != Integer.toUnsignedLong(b.getInt(28))) {
                return new long[0][];
            }
            List<long[]> out = new ArrayList<>();
            long lastLsn = -1;
            long lastOffset = -1;
            for (int p = HEADER_SIZE; p + ENTRY_SIZE <= raw.length; p += ENTRY_SIZE) {
                crc.reset();
                crc.update(raw, p, 28);
                if (crc.getValue() != Integer.toUnsignedLong(b.getInt(p + 28))) {
                    break;
                }
                long lsn = b.getLong(p);
                long offset = b.getLong(p + 16);
                if (lsn <= lastLsn || offset <= lastOffset) {
                    break;
                }
                out.add(new long[] {lsn, b.getLong(p + 8), offset});
                lastLsn = lsn;
                lastOffset = offset;
            }
            return out.toArray(new long[0][]);
        }

        /** The segment's last entry {lsn, timestamp, offset} at or before ``lsn``, or null. */
        long[] entryAtOrBefore(long base, long lsn) {
            long[] found = null;
            for (long[] e : bySegment.getOrDefault(base, new long[0][])) {
                if (e[0] > lsn) {
                    break;
                }
                found = e;
            }
            return found;
        }

        /** A superset of the lsns of records whose timestamps (ns) are in [lo, hi): from the last
         * entry older than lo (every record before it is older), to the first entry at or past
         * hi (every record from it on is that late or later). */
        long[] lsnsBetween(long lo, long hi) {
            if (hi <= 0 || lo >= hi) {  // record timestamps are at or after the epoch
                return NONE;
            }
            long first = 0;
            long end = END;
            for (long[] e : all) {
                if (lo > 0 && Long.compareUnsigned(e[1], lo) < 0) {
                    first = e[0];
                }
                if (end == END && hi != END && Long.compareUnsigned(e[1], hi) >= 0) {
                    end = e[0];
                }
            }
            return interval(first, end);
        }
    }
}
