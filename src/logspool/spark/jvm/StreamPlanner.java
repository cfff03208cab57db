package logspool.spark;

/**
 * The planning of a JVM stream, done by the Python stream reader in the driver's Python process
 * (logspool.spark.load_stream registers one per query through Py4J's callback server): the same
 * options, offsets, subscriber commits and data-loss rules as {@code readStream.format("logspool")},
 * from the same code. Offsets are its JSON text, {@code {"lsn": N}}, exactly as the Python
 * stream writes them, so a checkpoint of one is read by the other.
 */
public interface StreamPlanner {
    /** Where a new query starts (the subscriber's position, or the starting options). */
    String initialOffset();

    /** The end of the next batch from ``start``: everything there is if ``allAvailable``, else
     * within the maxRecordsPerTrigger / maxBytesPerTrigger limits. */
    String latestOffset(String start, boolean allAvailable);

    /** The head of the log now (for Spark's progress reports). */
    String reportLatestOffset();

    /** availableNow: the head now is where the query stops. */
    void prepareForTriggerAvailableNow();

    /** The ranges of [start, end), in the ranges option's form (LogspoolJvmSource). */
    String ranges(String start, String end);

    /** Spark is done with everything before ``end``: the subscriber moves there. */
    void commit(String end);
}
