package logspool.spark;

import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.zip.CRC32;

import com.github.luben.zstd.Zstd;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The batch reader of logspool segments on the JVM: {@code format("logspool-jvm")}.
 *
 * <p>It reads ranges that the Python driver planned ({@code logspool.spark.load}): the option
 * {@code ranges} lists, per partition, "base,offset,offsetLsn,startLsn,endLsn" separated by ";"
 * (the segment's base lsn, the byte offset to start parsing at and the lsn of the record there,
 * and the lsns [startLsn, endLsn) to return). Planning (positions, timestamps, the head) stays in
 * one place, the Python source; this class is only the parser, written from docs/FORMAT.md.
 */
public final class LogspoolJvmSource implements TableProvider, DataSourceRegister {
    static final int SEGMENT_HEADER_SIZE = 40;
    static final int RECORD_HEADER_SIZE = 32;
    static final int RECORD_OVERHEAD = 36;
    static final int FLAG_SEAL = 0x1;
    static final int FLAG_GAP = 0x2;
    static final int FLAG_ZSTD = 0x4;
    static final int NAME_DIGITS = 20;
    static final String SEGMENT_SUFFIX = ".seg";

    static final StructType FULL_SCHEMA = new StructType(new StructField[] {
        new StructField("lsn", DataTypes.LongType, false, org.apache.spark.sql.types.Metadata.empty()),
        new StructField("timestamp", DataTypes.TimestampType, false, org.apache.spark.sql.types.Metadata.empty()),
        new StructField("payload", DataTypes.BinaryType, false, org.apache.spark.sql.types.Metadata.empty()),
        new StructField("segment", DataTypes.LongType, false, org.apache.spark.sql.types.Metadata.empty()),
        new StructField("offset", DataTypes.LongType, false, org.apache.spark.sql.types.Metadata.empty()),
    });

    @Override
    public String shortName() {
        return "logspool-jvm";
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return schemaFor(options.getOrDefault("decode", "binary"));
    }

    static StructType schemaFor(String decode) {
        if (decode.equals("binary")) {
            return FULL_SCHEMA;
        }
        if (decode.equals("string")) {
            StructField[] fields = FULL_SCHEMA.fields().clone();
            fields[2] = new StructField("payload", DataTypes.StringType, false,
                    org.apache.spark.sql.types.Metadata.empty());
            return new StructType(fields);
        }
        throw new IllegalArgumentException(
                "option decode: the JVM reader takes binary or string, not '" + decode + "'");
    }

    @Override
    public boolean supportsExternalMetadata() {
        return false;
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        CaseInsensitiveStringMap options = new CaseInsensitiveStringMap(properties);
        return new LogTable(Settings.of(options), schema);
    }

    /** What the driver passes to every task. */
    static final class Settings implements Serializable {
        private static final long serialVersionUID = 1L;
        final String dir;
        final long sizeMax;
        final boolean verify;
        final boolean decodeString;
        final long[][] ranges;
        final long window;

        Settings(String dir, long sizeMax, boolean verify, boolean decodeString, long[][] ranges,
                long window) {
            this.dir = dir;
            this.sizeMax = sizeMax;
            this.verify = verify;
            this.decodeString = decodeString;
            this.ranges = ranges;
            this.window = window;
        }

        static Settings of(CaseInsensitiveStringMap options) {
            String dir = options.get("path");
            if (dir == null || dir.isEmpty()) {
                throw new IllegalArgumentException("logspool-jvm: give the log directory: load(DIR)");
            }
            String size = options.get("recordSizeMax");
            if (size == null) {
                throw new IllegalArgumentException(
                        "logspool-jvm: option recordSizeMax is missing (use logspool.spark.load, which plans the read)");
            }
            String decode = options.getOrDefault("decode", "binary");
            schemaFor(decode);
            String text = options.getOrDefault("ranges", "");
            List<long[]> ranges = new ArrayList<>();
            for (String part : text.split(";")) {
                if (part.isEmpty()) {
                    continue;
                }
                String[] numbers = part.split(",");
                if (numbers.length != 5) {
                    throw new IllegalArgumentException("logspool-jvm: option ranges: bad range '" + part + "'");
                }
                long[] r = new long[5];
                for (int i = 0; i < 5; i++) {
                    r[i] = Long.parseLong(numbers[i]);
                }
                ranges.add(r);
            }
            return new Settings(dir, Long.parseLong(size),
                    !options.getOrDefault("verifyChecksums", "true").equalsIgnoreCase("false"),
                    decode.equals("string"), ranges.toArray(new long[0][]),
                    Long.parseLong(options.getOrDefault("windowBytes", Long.toString(1L << 30))));
        }
    }

    static final class LogTable implements Table, SupportsRead {
        private final Settings settings;
        private final StructType schema;

        LogTable(Settings settings, StructType schema) {
            this.settings = settings;
            this.schema = schema;
        }

        @Override
        public String name() {
            return "logspool-jvm " + settings.dir;
        }

        @Override
        public StructType schema() {
            return schema;
        }

        @Override
        public Set<TableCapability> capabilities() {
            return EnumSet.of(TableCapability.BATCH_READ);
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
            return new LogScan(settings, schema);
        }
    }

    /** Scan, its builder and its batch in one: Spark asks only for the columns it needs. */
    static final class LogScan implements ScanBuilder, SupportsPushDownRequiredColumns, Scan, Batch {
        private final Settings settings;
        private final StructType full;
        private StructType required;

        LogScan(Settings settings, StructType schema) {
            this.settings = settings;
            this.full = schema;
            this.required = schema;
        }

        @Override
        public void pruneColumns(StructType requiredSchema) {
            required = requiredSchema;
        }

        @Override
        public Scan build() {
            return this;
        }

        @Override
        public StructType readSchema() {
            return required;
        }

        @Override
        public Batch toBatch() {
            return this;
        }

        @Override
        public InputPartition[] planInputPartitions() {
            InputPartition[] out = new InputPartition[settings.ranges.length];
            for (int i = 0; i < out.length; i++) {
                out[i] = new Range(settings.ranges[i]);
            }
            return out;
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            int[] columns = new int[required.fields().length];
            for (int i = 0; i < columns.length; i++) {
                columns[i] = full.fieldIndex(required.fields()[i].name());
            }
            return new Factory(settings, columns);
        }
    }

    static final class Range implements InputPartition {
        private static final long serialVersionUID = 1L;
        final long base;
        final long offset;
        final long offsetLsn;
        final long start;
        final long end;

        Range(long[] r) {
            base = r[0];
            offset = r[1];
            offsetLsn = r[2];
            start = r[3];
            end = r[4];
        }
    }

    static final class Factory implements PartitionReaderFactory {
        private static final long serialVersionUID = 1L;
        private final Settings settings;
        private final int[] columns;

        Factory(Settings settings, int[] columns) {
            this.settings = settings;
            this.columns = columns;
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            try {
                return new RangeReader(settings, (Range) partition, columns);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
    }

    static String segmentName(long base) {
        String digits = Long.toString(base);
        return "0".repeat(Math.max(0, NAME_DIGITS - digits.length())) + digits + SEGMENT_SUFFIX;
    }

    /** Walks one range of one segment, as docs/FORMAT.md §4 says: length, then the record. */
    static final class RangeReader implements PartitionReader<InternalRow> {
        private final Settings settings;
        private final Range range;
        private final int[] columns;
        private final String file;
        private final Path path;
        private final long size;
        private final CRC32 crc = new CRC32();
        private ByteBuffer buf;  // a window of the segment from file offset `start`
        private long start;
        private long pos;  // the next record's offset in the window
        private long lsn;
        private InternalRow row;

        RangeReader(Settings settings, Range range, int[] columns) throws IOException {
            this.settings = settings;
            this.range = range;
            this.columns = columns;
            this.path = Path.of(settings.dir, segmentName(range.base));
            this.file = path.toString();
            try (FileChannel ch = FileChannel.open(path, StandardOpenOption.READ)) {
                this.size = ch.size();
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
            }
            this.start = offset;
            this.pos = 0;
        }

        /** Whether ``need`` bytes from ``pos`` are in the file, moving the window on if they
         * are in the file but past the window. */
        private boolean have(long need) throws IOException {
            if (pos + need <= buf.limit()) {
                return true;
            }
            if (start + pos + need > size) {
                return false;
            }
            map(start + pos, need);
            return true;
        }

        private IOException corrupt(long at, String why) {
            return new IOException("CorruptionError: " + file + ": offset " + at + ": " + why);
        }

        @Override
        public boolean next() throws IOException {
            while (lsn < range.end) {
                if (!have(RECORD_OVERHEAD)) {
                    throw corrupt(start + pos, "lsn " + lsn + " expected before lsn " + range.end
                            + " (the segment ends)");
                }
                int p = (int) pos;
                long length = Integer.toUnsignedLong(buf.getInt(p));
                int flags = buf.getInt(p + 4);
                long rlsn = buf.getLong(p + 8);
                long ts = buf.getLong(p + 16);
                if (length > settings.sizeMax) {
                    throw corrupt(start + pos, "record length " + length + " exceeds the limit "
                            + settings.sizeMax);
                }
                if (!have(RECORD_OVERHEAD + length)) {
                    throw corrupt(start + pos, "lsn " + lsn + " expected before lsn " + range.end
                            + " (the record is cut off)");
                }
                p = (int) pos;  // the window may have moved
                int end = p + RECORD_OVERHEAD + (int) length;
                if (settings.verify || flags != 0) {
                    crc.reset();
                    crc.update(buf.slice(p, end - p - 4));
                    long found = Integer.toUnsignedLong(buf.getInt(end - 4));
                    if (crc.getValue() != found) {
                        throw corrupt(start + pos, String.format(
                                "checksum mismatch (expected 0x%08x, found 0x%08x)", crc.getValue(), found));
                    }
                }
                if (rlsn != lsn) {
                    throw corrupt(start + pos, "record has lsn " + rlsn + ", expected " + lsn);
                }
                long at = start + pos;
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
                if (flags != 0 && flags != FLAG_ZSTD) {
                    throw corrupt(at, String.format("unknown record flags 0x%08x", flags));
                }
                lsn += 1;
                if (rlsn < range.start) {
                    continue;
                }
                byte[] payload = new byte[(int) length];
                buf.get(p + RECORD_HEADER_SIZE, payload);
                if (flags == FLAG_ZSTD) {
                    payload = unzstd(payload, at, rlsn);
                }
                Object[] values = new Object[columns.length];
                for (int i = 0; i < columns.length; i++) {
                    switch (columns[i]) {
                        case 0 -> values[i] = rlsn;
                        case 1 -> values[i] = ts / 1000;
                        case 2 -> values[i] = settings.decodeString ? utf8(payload) : payload;
                        case 3 -> values[i] = range.base;
                        default -> values[i] = at;
                    }
                }
                row = new GenericInternalRow(values);
                return true;
            }
            return false;
        }

        private byte[] unzstd(byte[] frame, long at, long rlsn) throws IOException {
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

        /**
         * The payload as text, each maximal ill-formed subpart replaced by one U+FFFD (the
         * Unicode standard's recommended practice, which Python's {@code decode("utf-8",
         * "replace")} follows; java.nio's decoder differs on surrogates and overlongs).
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

        @Override
        public InternalRow get() {
            return row;
        }

        @Override
        public void close() {
        }
    }
}
