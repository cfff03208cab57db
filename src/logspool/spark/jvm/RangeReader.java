package logspool.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.zip.CRC32;

import com.github.luben.zstd.Zstd;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Walks one range of one segment, as docs/FORMAT.md §4 says (length, then the record), and hands
 * Spark columnar batches of up to {@link #BATCH_ROWS} rows.
 *
 * <p>What a record costs: its 32-byte header read from a mapping of the segment, one CRC-32 call
 * over the mapped bytes (java.util.zip.CRC32 on a direct buffer is an intrinsic: no copy), and,
 * only if the query reads the payload, one copy of it out of the mapping, made when Spark asks for
 * it. The numbers go into primitive arrays; no object is made per record (the row reader that this
 * replaced boxed four longs, copied each payload once into a byte[] and Spark copied it again into
 * an UnsafeRow). A query that reads no column ({@code count()}) walks the headers only: it checks
 * each record's length, lsn and flags and never reads a payload or its checksum.
 *
 * <p>A batch refers to the current window of the mapping; the window moves only at the start of
 * {@link #next}, when Spark is done with the previous batch (the contract of
 * {@link PartitionReader#get}).
 */
final class RangeReader implements PartitionReader<ColumnarBatch> {
    static final int BATCH_ROWS = 4096;
    static final int RECORD_HEADER_SIZE = 32;
    static final int RECORD_OVERHEAD = 36;
    static final int FLAG_SEAL = 0x1;
    static final int FLAG_GAP = 0x2;
    static final int FLAG_ZSTD = 0x4;

    private final LogspoolJvmSource.Settings settings;
    private final LogspoolJvmSource.Range range;
    private final String file;
    private final Path path;
    private final long size;
    private final boolean countOnly;  // no column is read: headers only
    private final boolean payloads;  // the payload column is read
    private final CRC32 crc = new CRC32();
    private ByteBuffer buf;  // a window of the segment from file offset `start`
    private ByteBuffer span;  // the same window, for CRC calls (its position and limit move)
    private long start;
    private long pos;  // the next record's offset in the window
    private long lsn;
    // The rows of the batch being handed out.
    final long[] lsns;
    final long[] micros;
    final long[] offsets;
    final int[] positions;  // the payload's offset in the window
    final int[] lengths;
    final byte[][] inflated;  // a compressed record's payload, else null
    private final ColumnarBatch batch;
    // Checksums checked many records at once: the records from window offset pendingFrom to pos
    // are unchecked; pendingCrc is the CRC-32 of those bytes if every record is whole.
    private int pendingFrom = -1;
    private int pendingCrc;
    static final int RESIDUE = 0x2144DF1C;  // CRC-32 of any record followed by its own CRC
    // SHIFT[j]: CRC-32's register moved through 2^j zero bytes (a linear map: 4 byte tables);
    // one for each bit of an int, whatever length a damaged header says.
    static final int[][] SHIFT = new int[32][];

    static {
        int[] col = new int[32];
        for (int i = 0; i < 32; i++) {  // one zero byte
            int r = 1 << i;
            for (int k = 0; k < 8; k++) {
                r = (r >>> 1) ^ (-(r & 1) & 0xEDB88320);
            }
            col[i] = r;
        }
        for (int j = 0; j < SHIFT.length; j++) {
            int[] t = new int[1024];
            for (int k = 0; k < 4; k++) {
                for (int b = 1; b < 256; b++) {
                    int low = Integer.numberOfTrailingZeros(b);
                    t[k * 256 + b] = t[k * 256 + (b & (b - 1))] ^ col[k * 8 + low];
                }
            }
            SHIFT[j] = t;
            for (int i = 0; i < 32; i++) {
                col[i] = apply(t, col[i]);  // squared: 2^(j+1) bytes
            }
        }
    }

    static int apply(int[] t, int v) {
        return t[v & 0xff] ^ t[256 + ((v >>> 8) & 0xff)] ^ t[512 + ((v >>> 16) & 0xff)] ^ t[768 + (v >>> 24)];
    }

    /** The CRC-32 of bytes B followed by n bytes whose own CRC-32 is next, given crc = CRC-32(B). */
    static int chain(int crc, int n, int next) {
        for (int j = 0; n != 0; j++, n >>>= 1) {
            if ((n & 1) != 0) {
                crc = apply(SHIFT[j], crc);
            }
        }
        return crc ^ next;
    }

    RangeReader(LogspoolJvmSource.Settings settings, LogspoolJvmSource.Range range, int[] columns) throws IOException {
        this.settings = settings;
        this.range = range;
        this.path = Path.of(settings.dir, LogspoolJvmSource.segmentName(range.base));
        this.file = path.toString();
        this.countOnly = columns.length == 0;
        int rows = countOnly ? 0 : BATCH_ROWS;
        lsns = new long[rows];
        micros = new long[rows];
        offsets = new long[rows];
        positions = new int[rows];
        lengths = new int[rows];
        inflated = new byte[rows][];
        ColumnVector[] vectors = new ColumnVector[columns.length];
        boolean readsPayload = false;
        for (int i = 0; i < columns.length; i++) {
            switch (columns[i]) {
                case 0 -> vectors[i] = new Longs(DataTypes.LongType, lsns);
                case 1 -> vectors[i] = new Longs(DataTypes.TimestampType, micros);
                case 2 -> {
                    vectors[i] = new Payloads(settings.decodeString ? DataTypes.StringType : DataTypes.BinaryType);
                    readsPayload = true;
                }
                case 3 -> vectors[i] = new Constant(range.base);
                default -> vectors[i] = new Longs(DataTypes.LongType, offsets);
            }
        }
        this.payloads = readsPayload;
        this.batch = new ColumnarBatch(vectors);
        try (FileChannel ch = FileChannel.open(path, StandardOpenOption.READ)) {
            this.size = ch.size();
        } catch (NoSuchFileException e) {
            throw LogspoolJvmSource.missing(settings.dir, file);
        }
        if (size < range.offset) {
            throw corrupt(range.offset, "the segment is shorter than the planned range");
        }
        map(range.offset, 0);
        this.lsn = range.offsetLsn;
    }

    /** Maps the segment from ``offset`` on, at least ``need`` bytes: a window of
     * {@code settings.window} bytes (1 GiB: a segment may be 4 GiB, a mapping at most 2), or
     * one record if it is larger (a record is at most 256 MiB). */
    private void map(long offset, long need) throws IOException {
        try (FileChannel ch = FileChannel.open(path, StandardOpenOption.READ)) {
            MappedByteBuffer map = ch.map(FileChannel.MapMode.READ_ONLY, offset,
                    Math.min(size - offset, Math.max(settings.window, need)));
            this.buf = map.order(ByteOrder.LITTLE_ENDIAN);
            this.span = buf.duplicate();
        }
        this.start = offset;
        this.pos = 0;
    }

    /** Makes ``need`` bytes from ``pos`` readable: true if they are in the window; else false if
     * the batch has rows (it is handed out first: its rows point into this window), else the
     * window moves on; CorruptionError if the file ends before them. */
    private boolean have(long need, int rows) throws IOException {
        if (pos + need <= buf.limit()) {
            return true;
        }
        if (start + pos + need > size) {
            throw corrupt(start + pos, "lsn " + lsn + " expected before lsn " + range.end
                    + (need == RECORD_OVERHEAD ? " (the segment ends)" : " (the record is cut off)"));
        }
        if (rows > 0) {
            return false;
        }
        settle();
        map(start + pos, need);
        return true;
    }

    IOException corrupt(long at, String why) {
        return new IOException("CorruptionError: " + file + ": offset " + at + ": " + why);
    }

    @Override
    public boolean next() throws IOException {
        int rows = 0;
        int rowsMax = countOnly ? Integer.MAX_VALUE - 1 : BATCH_ROWS;
        try {
            while (lsn < range.end && rows < rowsMax) {
                if (!have(RECORD_OVERHEAD, rows)) {
                    break;
                }
                int p = (int) pos;
                long length = Integer.toUnsignedLong(buf.getInt(p));
                if (length > settings.sizeMax) {
                    throw corrupt(start + pos, "record length " + length + " exceeds the limit " + settings.sizeMax);
                }
                if (!have(RECORD_OVERHEAD + length, rows)) {
                    break;
                }
                p = (int) pos;  // the window may have moved
                int flags = buf.getInt(p + 4);
                long rlsn = buf.getLong(p + 8);
                int end = p + RECORD_OVERHEAD + (int) length;
                boolean plain = flags == 0 || flags == FLAG_ZSTD;
                boolean deferred = flags == 0 && settings.verify && !countOnly;
                // A plain record's checksum is checked with the batch's (settle(): one call for
                // all of them, the expected value chained from their lengths); any other's here.
                if (!deferred && (plain ? settings.verify && !countOnly : true)) {
                    check(p, end);
                }
                if (rlsn != lsn) {
                    if (deferred) {
                        settle();
                        check(p, end);
                    }
                    throw corrupt(start + pos, "record has lsn " + rlsn + ", expected " + lsn);
                }
                long at = start + pos;
                if (deferred || pendingFrom >= 0) {  // a checked gap or zstd record in the span: chained too
                    if (pendingFrom < 0) {
                        pendingFrom = p;
                        pendingCrc = 0;
                    }
                    pendingCrc = chain(pendingCrc, end - p, RESIDUE);
                }
                pos = end;
                if (flags == FLAG_GAP) {
                    long next = length >= 8 ? buf.getLong(p + RECORD_HEADER_SIZE) : rlsn + 1;
                    if (next <= rlsn) {
                        throw corrupt(at, "gap record from lsn " + rlsn + " to " + next + " goes back");
                    }
                    lsn = next;
                    continue;
                }
                if (flags == FLAG_SEAL) {
                    throw corrupt(at, "lsn " + lsn + " expected before lsn " + range.end + " (sealed)");
                }
                if (!plain) {
                    throw corrupt(at, String.format("unknown record flags 0x%08x", flags));
                }
                lsn += 1;
                if (rlsn < range.start) {
                    continue;
                }
                if (!countOnly) {
                    lsns[rows] = rlsn;
                    micros[rows] = buf.getLong(p + 16) / 1000;  // ns to Spark's us, truncated as Python does
                    offsets[rows] = at;
                    positions[rows] = p + RECORD_HEADER_SIZE;
                    lengths[rows] = (int) length;
                    inflated[rows] = flags == FLAG_ZSTD && payloads ? unzstd(p + RECORD_HEADER_SIZE, (int) length, at, rlsn) : null;
                }
                rows++;
            }
            settle();
        } catch (IOException | RuntimeException e) {
            settle();  // an earlier record's checksum error comes first
            throw e;
        }
        batch.setNumRows(rows);
        return rows > 0;
    }

    /** Checks the pending records' checksums with one CRC-32 call over their bytes (a call a
     * record cost ~60 ns, four fifths of it the call's own: benchmarks/RESULTS.md, issue 28).
     * Every record ends with the CRC-32 of the bytes before it, so the CRC-32 of a record whole
     * is one constant (RESIDUE), and that of records one after another follows from their lengths
     * alone (CRC-32 is linear: chain()). If they are wrong, the first wrong record's error is
     * thrown, as a check of each would have thrown it. Before a batch is handed on, before the
     * window moves, and before any other error of the batch is thrown. */
    private void settle() throws IOException {
        int from = pendingFrom;
        if (from < 0) {
            return;
        }
        pendingFrom = -1;
        span.limit((int) pos).position(from);
        crc.reset();
        crc.update(span);
        if ((int) crc.getValue() == pendingCrc) {
            return;
        }
        for (int p = from; p < pos; ) {
            int end = p + RECORD_OVERHEAD + buf.getInt(p);
            check(p, end);
            p = end;
        }
        throw corrupt(start + from, "checksum mismatch in the records from here");
    }

    /** One record's checksum, the record at window offsets p to end. */
    private void check(int p, int end) throws IOException {
        span.limit(end - 4).position(p);
        crc.reset();
        crc.update(span);  // the mapped bytes themselves: no copy
        long found = Integer.toUnsignedLong(buf.getInt(end - 4));
        if (crc.getValue() != found) {
            throw corrupt(start + p, String.format(
                    "checksum mismatch (expected 0x%08x, found 0x%08x)", crc.getValue(), found));
        }
    }

    private byte[] unzstd(int p, int length, long at, long rlsn) throws IOException {
        byte[] frame = new byte[length];
        buf.get(p, frame);
        long size = Zstd.getFrameContentSize(frame);
        if (size < 0 || size > settings.sizeMax) {
            throw corrupt(at, "compressed record at lsn " + rlsn + ": frame content size "
                    + (size < 0 ? "missing" : size + " above the limit " + settings.sizeMax));
        }
        byte[] out = new byte[(int) size];
        long n = Zstd.decompress(out, frame);
        if (Zstd.isError(n) || n != size) {
            throw corrupt(at, "compressed record at lsn " + rlsn + ": the frame does not decompress");
        }
        return out;
    }

    @Override
    public ColumnarBatch get() {
        return batch;
    }

    @Override
    public void close() {
    }

    /** Row ``i``'s payload: a copy out of the mapping (the one copy), or its inflated bytes. */
    byte[] payload(int i) {
        byte[] z = inflated[i];
        if (z != null) {
            return z;
        }
        byte[] out = new byte[lengths[i]];
        buf.get(positions[i], out);
        return out;
    }

    /**
     * The payload as text, each maximal ill-formed subpart replaced by one U+FFFD (the Unicode
     * standard's recommended practice, which Python's {@code decode("utf-8", "replace")} follows;
     * java.nio's decoder differs on surrogates and overlongs).
     */
    static UTF8String utf8(byte[] in) {
        java.io.ByteArrayOutputStream out = null;
        int i = 0;
        int copied = 0;
        while (i < in.length) {
            int b = in[i] & 0xff;
            int need;
            int lo = 0x80;
            int hi = 0xbf;
            if (b < 0x80) {
                i += 1;
                continue;
            } else if (b >= 0xc2 && b <= 0xdf) {
                need = 1;
            } else if (b >= 0xe0 && b <= 0xef) {
                need = 2;
                lo = b == 0xe0 ? 0xa0 : 0x80;
                hi = b == 0xed ? 0x9f : 0xbf;
            } else if (b >= 0xf0 && b <= 0xf4) {
                need = 3;
                lo = b == 0xf0 ? 0x90 : 0x80;
                hi = b == 0xf4 ? 0x8f : 0xbf;
            } else {
                need = 0;  // never a lead byte
            }
            int taken = 1;  // the lead byte, then each continuation byte that fits
            boolean whole = need > 0;
            for (int k = 1; k <= need; k++) {
                int c = i + k < in.length ? in[i + k] & 0xff : -1;
                if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xbf)) {
                    whole = false;
                    break;
                }
                taken++;
            }
            if (whole) {
                i += taken;
                continue;
            }
            if (out == null) {
                out = new java.io.ByteArrayOutputStream(in.length + 8);
            }
            out.write(in, copied, i - copied);
            out.write(0xef);
            out.write(0xbf);
            out.write(0xbd);
            i += taken;
            copied = i;
        }
        if (out == null) {
            return UTF8String.fromBytes(in);
        }
        out.write(in, copied, in.length - copied);
        return UTF8String.fromBytes(out.toByteArray());
    }

    /** A column the batch's rows read through: only the getters of its type answer. */
    abstract static class Column extends ColumnVector {
        Column(DataType type) {
            super(type);
        }

        @Override
        public void close() {
        }

        @Override
        public boolean hasNull() {
            return false;
        }

        @Override
        public int numNulls() {
            return 0;
        }

        @Override
        public boolean isNullAt(int rowId) {
            return false;
        }

        private UnsupportedOperationException wrong() {
            return new UnsupportedOperationException("logspool-jvm: a " + type.simpleString() + " column");
        }

        @Override
        public boolean getBoolean(int rowId) {
            throw wrong();
        }

        @Override
        public byte getByte(int rowId) {
            throw wrong();
        }

        @Override
        public short getShort(int rowId) {
            throw wrong();
        }

        @Override
        public int getInt(int rowId) {
            throw wrong();
        }

        @Override
        public long getLong(int rowId) {
            throw wrong();
        }

        @Override
        public float getFloat(int rowId) {
            throw wrong();
        }

        @Override
        public double getDouble(int rowId) {
            throw wrong();
        }

        @Override
        public ColumnarArray getArray(int rowId) {
            throw wrong();
        }

        @Override
        public ColumnarMap getMap(int rowId) {
            throw wrong();
        }

        @Override
        public Decimal getDecimal(int rowId, int precision, int scale) {
            throw wrong();
        }

        @Override
        public UTF8String getUTF8String(int rowId) {
            throw wrong();
        }

        @Override
        public byte[] getBinary(int rowId) {
            throw wrong();
        }

        @Override
        public ColumnVector getChild(int ordinal) {
            throw wrong();
        }
    }

    /** lsn, timestamp (microseconds) or offset: the batch's array. */
    static final class Longs extends Column {
        private final long[] values;

        Longs(DataType type, long[] values) {
            super(type);
            this.values = values;
        }

        @Override
        public long getLong(int rowId) {
            return values[rowId];
        }
    }

    /** segment: the range's base lsn, the same in every row. */
    static final class Constant extends Column {
        private final long value;

        Constant(long value) {
            super(DataTypes.LongType);
            this.value = value;
        }

        @Override
        public long getLong(int rowId) {
            return value;
        }
    }

    /** payload, binary or string, copied out of the mapping when Spark asks for it. */
    final class Payloads extends Column {
        Payloads(DataType type) {
            super(type);
        }

        @Override
        public byte[] getBinary(int rowId) {
            return payload(rowId);
        }

        @Override
        public UTF8String getUTF8String(int rowId) {
            return utf8(payload(rowId));
        }
    }

    /** The same rows one at a time, for a Spark that asks for rows (it never does while
     * {@code supportColumnarReads} says yes; the interface requires a row reader). */
    static final class Rows implements PartitionReader<InternalRow> {
        private final PartitionReader<ColumnarBatch> batches;
        private int row;
        private int rows;

        Rows(PartitionReader<ColumnarBatch> batches) {
            this.batches = batches;
        }

        @Override
        public boolean next() throws IOException {
            if (row + 1 >= rows) {
                if (!batches.next()) {  // a batch it returns holds a row at least
                    return false;
                }
                rows = batches.get().numRows();
                row = -1;
            }
            row++;
            return true;
        }

        @Override
        public InternalRow get() {
            return batches.get().getRow(row);
        }

        @Override
        public void close() throws IOException {
            batches.close();
        }
    }
}
