package logspool.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadAllAvailable;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.sources.Filter;

/**
 * A micro-batch stream of a log on the JVM: {@code readStream.format("logspool-jvm")}, made by
 * logspool.spark.load_stream. The driver's Python stream reader plans (StreamPlanner); the
 * executors read the planned ranges with RangeReader, as the batch reader does.
 */
final class LogStream implements MicroBatchStream, SupportsTriggerAvailableNow {
    /** The planners of this driver's streaming DataFrames, by the id load_stream passes as the
     * option planner (a few objects a DataFrame, kept while the process lives). */
    static final Map<String, StreamPlanners> PLANNERS = new ConcurrentHashMap<>();

    private final LogspoolJvmSource.Settings settings;
    private final StreamPlanner planner;
    private final int[] columns;
    private final Filter[] pushed;

    LogStream(LogspoolJvmSource.Settings settings, int[] columns, Filter[] pushed) {
        this.settings = settings;
        StreamPlanners planners = settings.planner == null ? null : PLANNERS.get(settings.planner);
        if (planners == null) {
            throw new IllegalStateException("logspool-jvm: a stream is planned by the Python process that started it: "
                    + "use logspool.spark.load_stream(spark, DIR, ...), not readStream.format(\"logspool-jvm\")");
        }
        this.planner = planners.open();
        this.columns = columns;
        this.pushed = pushed;
    }

    static final class LogOffset extends Offset {
        private final String json;

        LogOffset(String json) {
            this.json = json;
        }

        @Override
        public String json() {
            return json;
        }
    }

    @Override
    public Offset initialOffset() {
        return new LogOffset(planner.initialOffset());
    }

    @Override
    public Offset deserializeOffset(String json) {
        return new LogOffset(json);
    }

    @Override
    public ReadLimit getDefaultReadLimit() {
        if (settings.maxRows > 0) {
            return ReadLimit.maxRows(settings.maxRows);
        }
        if (settings.maxBytes > 0) {
            return ReadLimit.maxBytes(settings.maxBytes);
        }
        return ReadLimit.allAvailable();
    }

    @Override
    public Offset latestOffset() {
        throw new UnsupportedOperationException("logspool-jvm: Spark asks latestOffset(start, limit)");
    }

    @Override
    public Offset latestOffset(Offset start, ReadLimit limit) {
        return new LogOffset(planner.latestOffset(start.json(), limit instanceof ReadAllAvailable));
    }

    @Override
    public Offset reportLatestOffset() {
        return new LogOffset(planner.reportLatestOffset());
    }

    @Override
    public void prepareForTriggerAvailableNow() {
        planner.prepareForTriggerAvailableNow();
    }

    // The last batch planned: Spark plans a micro-batch's partitions twice (once to plan the
    // query, once more as it runs it), and each plan is a call into the driver's Python (~7 ms).
    // The same two offsets give the same ranges: a log below its end does not change.
    private String plannedStart;
    private String plannedEnd;
    private InputPartition[] planned;

    @Override
    public synchronized InputPartition[] planInputPartitions(Offset start, Offset end) {
        String from = start.json();
        String to = end.json();
        if (planned != null && from.equals(plannedStart) && to.equals(plannedEnd)) {
            return planned.clone();
        }
        long[][] ranges = LogspoolJvmSource.Settings.parseRanges(planner.ranges(from, to));
        InputPartition[] partitions;
        try {
            partitions = LogspoolJvmSource.Ranges.pack(Pushdown.narrow(settings.dir, ranges, pushed), settings.pack);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        plannedStart = from;
        plannedEnd = to;
        planned = partitions;
        return partitions.clone();
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new LogspoolJvmSource.Factory(settings, columns);
    }

    @Override
    public void commit(Offset end) {
        planner.commit(end.json());
    }

    @Override
    public void stop() {
    }
}
