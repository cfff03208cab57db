package logspool.spark;

import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.catalyst.InternalRow;
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
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * The reader of logspool segments on the JVM: {@code format("logspool-jvm")}, batch and stream.
 *
 * <p>It reads ranges that the Python driver planned ({@code logspool.spark.load}): the option
 * {@code ranges} lists ranges "base,offset,offsetLsn,startLsn,endLsn,bytes" separated by ";"
 * (the segment's base lsn, the byte offset to start parsing at and the lsn of the record there,
 * the lsns [startLsn, endLsn) to return, and about how many bytes they hold, or 0). With the
 * options packTasks, packOpenCost and packMaxBytes (the session's shares), small ranges are
 * packed into one task as Spark packs small files (Ranges.pack), after they are cut to the
 * pushed filters; a task's ranges are read one after another (ChainReader). Planning
 * (positions, timestamps, the head) stays in one place, the Python source; this reader parses
 * (RangeReader, written from docs/FORMAT.md) and cuts the planned ranges to the filters Spark
 * pushes on lsn and timestamp (Pushdown, through the segments' indexes). A stream (LogStream, made by {@code logspool.spark.load_stream}) is planned
 * batch by batch by the Python stream reader, through a StreamPlanner.
 */
public final class LogspoolJvmSource implements TableProvider, DataSourceRegister {
    static final int NAME_DIGITS = 20;
    static final String SEGMENT_SUFFIX = ".seg";
    static final String INDEX_SUFFIX = ".idx";
    static final String META_NAME = "meta";

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
        if (options.containsKey("committer")) {  // a write (logspool.spark.write, write_stream)
            return new LogSink(properties, schema);
        }
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
        final String planner;  // a stream's: the id of its planners (LogStream.PLANNERS)
        final long maxRows;  // a stream's default read limit, or 0
        final long maxBytes;
        final long[] pack;  // tasks to share among, the open cost, the most bytes a task; or null

        Settings(String dir, long sizeMax, boolean verify, boolean decodeString, long[][] ranges,
                long window, String planner, long maxRows, long maxBytes, long[] pack) {
            this.dir = dir;
            this.sizeMax = sizeMax;
            this.verify = verify;
            this.decodeString = decodeString;
            this.ranges = ranges;
            this.window = window;
            this.planner = planner;
            this.maxRows = maxRows;
            this.maxBytes = maxBytes;
            this.pack = pack;
        }

        static Settings of(CaseInsensitiveStringMap options) {
            String dir = options.get("path");
            if (dir == null || dir.isEmpty()) {
                throw new IllegalArgumentException("logspool-jvm: give the log directory: load(DIR)");
            }
            String size = options.get("recordSizeMax");
            if (size == null) {
                throw new IllegalArgumentException(
                        "logspool-jvm: option recordSizeMax is missing (use logspool.spark.load, which plans the read; "
                                + "to write, logspool.spark.write(df) or write_stream(df))");
            }
            String decode = options.getOrDefault("decode", "binary");
            schemaFor(decode);
            return new Settings(dir, Long.parseLong(size),
                    !options.getOrDefault("verifyChecksums", "true").equalsIgnoreCase("false"),
                    decode.equals("string"), parseRanges(options.getOrDefault("ranges", "")),
                    Long.parseLong(options.getOrDefault("windowBytes", Long.toString(1L << 30))),
                    options.get("planner"), Long.parseLong(options.getOrDefault("maxRows", "0")),
                    Long.parseLong(options.getOrDefault("maxBytes", "0")),
                    options.containsKey("packTasks") ? new long[] {Long.parseLong(options.get("packTasks")),
                        Long.parseLong(options.get("packOpenCost")), Long.parseLong(options.get("packMaxBytes"))}
                            : null);
        }

        /** "base,offset,offsetLsn,startLsn,endLsn,bytes;..." (the ranges option, and a stream
         * planner's; bytes may be left out: 0). */
        static long[][] parseRanges(String text) {
            List<long[]> ranges = new ArrayList<>();
            for (String part : text.split(";")) {
                if (part.isEmpty()) {
                    continue;
                }
                String[] numbers = part.split(",");
                if (numbers.length != 5 && numbers.length != 6) {
                    throw new IllegalArgumentException("logspool-jvm: option ranges: bad range '" + part + "'");
                }
                long[] r = new long[6];
                for (int i = 0; i < numbers.length; i++) {
                    r[i] = Long.parseLong(numbers[i]);
                }
                ranges.add(r);
            }
            return ranges.toArray(new long[0][]);
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
            return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ);
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
            return new LogScan(settings, schema);
        }
    }

    /**
     * Scan, its builder and its batch in one: Spark asks only for the columns it needs, and pushes
     * its filters; those on lsn and timestamp cut the planned ranges (Pushdown). Filters on lsn
     * are then done (the ranges hold exactly their lsns); those on timestamp are checked by Spark
     * again on the rows read.
     */
    static final class LogScan implements ScanBuilder, SupportsPushDownRequiredColumns, SupportsPushDownFilters,
            Scan, Batch {
        private final Settings settings;
        private final StructType full;
        private StructType required;
        private Filter[] pushed = new Filter[0];
        private Range[] planned;  // the ranges cut to the pushed filters: planned once

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
        public Filter[] pushFilters(Filter[] filters) {
            List<Filter> taken = new ArrayList<>();
            List<Filter> after = new ArrayList<>();
            for (Filter f : filters) {
                int kind = Pushdown.kind(f);
                if (kind != Pushdown.UNSUPPORTED) {
                    taken.add(f);
                }
                if (kind != Pushdown.EXACT) {
                    after.add(f);
                }
            }
            pushed = taken.toArray(new Filter[0]);
            return after.toArray(new Filter[0]);
        }

        @Override
        public Filter[] pushedFilters() {
            return pushed;
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

        private Range[] planned() {
            if (planned == null) {
                try {
                    planned = Pushdown.narrow(settings.dir, settings.ranges, pushed);
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                }
            }
            return planned;
        }

        /** What explain() shows: the ranges read of those planned, the lsns they hold, and the
         * filters pushed. */
        @Override
        public String description() {
            long lsns = 0;
            for (Range r : planned()) {
                lsns += r.end - r.start;
            }
            return "logspool " + settings.dir + ": " + planned().length + " of " + settings.ranges.length
                    + " ranges, " + lsns + " lsns, PushedFilters: " + Arrays.toString(pushed);
        }

        @Override
        public InputPartition[] planInputPartitions() {
            return Ranges.pack(planned(), settings.pack);
        }

        private int[] columns() {
            int[] columns = new int[required.fields().length];
            for (int i = 0; i < columns.length; i++) {
                columns[i] = full.fieldIndex(required.fields()[i].name());
            }
            return columns;
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            return new Factory(settings, columns());
        }

        @Override
        public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
            return new LogStream(settings, columns(), pushed);
        }
    }

    static final class Range implements InputPartition {
        private static final long serialVersionUID = 2L;
        final long base;
        final long offset;
        final long offsetLsn;
        final long start;
        final long end;
        final long bytes;  // about how many bytes its records take (0: not known)

        Range(long[] r) {
            base = r[0];
            offset = r[1];
            offsetLsn = r[2];
            start = r[3];
            end = r[4];
            bytes = r[5];
        }
    }

    /** A task's ranges, read one after another (the driver packed them as Spark packs small
     * files: ChainReader). */
    static final class Ranges implements InputPartition {
        private static final long serialVersionUID = 1L;
        final Range[] ranges;

        Ranges(Range[] ranges) {
            this.ranges = ranges;
        }

        /** The ranges, in their order (lsn order), as tasks: packed as Spark packs small files
         * (FilePartition.getFilePartitions: a task takes ranges while their bytes, each with the
         * open cost, stay within one share of the whole among ``pack[0]`` tasks, at least the
         * open cost, at most ``pack[2]``), but in lsn order, not the largest first, so that the
         * tasks, and the ranges in each, follow the log (a copy into a log keeps its order).
         * Without ``pack``, a task a range. A lone range is its own partition. */
        static InputPartition[] pack(Range[] ranges, long[] pack) {
            if (pack == null || ranges.length < 2) {
                return Arrays.copyOf(ranges, ranges.length, InputPartition[].class);
            }
            long openCost = pack[1];
            long total = 0;
            for (Range r : ranges) {
                total += r.bytes + openCost;
            }
            long share = Math.min(pack[2], Math.max(openCost, (total + pack[0] - 1) / Math.max(1, pack[0])));
            List<InputPartition> out = new ArrayList<>();
            int from = 0;
            long held = 0;
            for (int i = 0; i < ranges.length; i++) {
                if (i > from && held + ranges[i].bytes > share) {
                    out.add(task(ranges, from, i));
                    from = i;
                    held = 0;
                }
                held += ranges[i].bytes + openCost;
            }
            out.add(task(ranges, from, ranges.length));
            return out.toArray(new InputPartition[0]);
        }

        private static InputPartition task(Range[] ranges, int from, int to) {
            return to - from == 1 ? ranges[from] : new Ranges(Arrays.copyOfRange(ranges, from, to));
        }
    }

    /** Reads a task's ranges one after another, each with its own RangeReader. */
    static final class ChainReader implements PartitionReader<ColumnarBatch> {
        private final Settings settings;
        private final Range[] ranges;
        private final int[] columns;
        private int next;
        private RangeReader current;

        ChainReader(Settings settings, Ranges task, int[] columns) {
            this.settings = settings;
            this.ranges = task.ranges;
            this.columns = columns;
        }

        @Override
        public boolean next() throws IOException {
            while (true) {  // bounded: each turn ends a range or returns
                if (current == null) {
                    if (next == ranges.length) {
                        return false;
                    }
                    current = new RangeReader(settings, ranges[next++], columns);
                }
                if (current.next()) {
                    return true;
                }
                current.close();
                current = null;
            }
        }

        @Override
        public ColumnarBatch get() {
            return current.get();
        }

        @Override
        public void close() throws IOException {
            if (current != null) {
                current.close();
                current = null;
            }
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
        public boolean supportColumnarReads(InputPartition partition) {
            return true;
        }

        @Override
        public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
            if (partition instanceof Ranges task) {
                return new ChainReader(settings, task, columns);
            }
            try {
                return new RangeReader(settings, (Range) partition, columns);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            return new RangeReader.Rows(createColumnarReader(partition));
        }
    }

    static String segmentName(long base) {
        String digits = Long.toString(base);
        return "0".repeat(Math.max(0, NAME_DIGITS - digits.length())) + digits + SEGMENT_SUFFIX;
    }

    static String indexName(long base) {
        String name = segmentName(base);
        return name.substring(0, name.length() - SEGMENT_SUFFIX.length()) + INDEX_SUFFIX;
    }

    /** Called by logspool.spark.write and write_stream (through Py4J): the Python commit of the
     * writes this process starts. */
    public static void registerCommitter(String id, WriteCommitter committer) {
        LogSink.register(id, committer);
    }

    /** Called by logspool.spark.load_stream (through Py4J): the planners of a streaming DataFrame. */
    public static void registerPlanners(String id, StreamPlanners planners) {
        LogStream.PLANNERS.put(id, planners);
    }

    /** The error of a task that finds no segment file where the driver planned one: retention
     * removed it, or this machine does not see the log (as the Python source says it). */
    static IOException missing(String dir, String file) {
        if (Files.exists(Path.of(dir, META_NAME))) {
            return new IOException("LogspoolError: " + file + ": the segment was removed (retention) after the "
                    + "read was planned");
        }
        return new IOException("LogspoolError: " + file + ": this task cannot see the log the driver planned the "
                + "read of: the log must be on a file system the driver and every executor mount at the same path");
    }
}
