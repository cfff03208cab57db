package logspool.spark;

/**
 * The driver's half of the JVM writer (LogSink), done by the Python commit in the driver's Python
 * process (logspool.spark.write and write_stream register one through Py4J's callback server):
 * the same option checks, log creation, exactly-once state and all-or-nothing publish as
 * {@code format("logspool")}'s writer, from the same code. Every argument and answer is text
 * (JSON), so nothing but strings crosses Py4J.
 */
public interface WriteCommitter {
    /** A new write: checks the options (a JSON object, as the Python source takes them) and the
     * schema (Spark's JSON), creates the log if it is missing, and answers a JSON object with
     * "job" (the id to pass back) and "staging" (the directory the tasks stage their files in).
     * {@code queryId} is the streaming query's id (from its checkpoint), for a stream. */
    String open(String options, String schema, String queryId, boolean streaming);

    /** Append the staged files the tasks reported (JSON: [[partition, path, rows, bytes], ...])
     * as one batch published at once; a stream's {@code batchId} makes it exactly-once (-1: a
     * batch write). Durable on return. */
    void commit(String job, String messages, long batchId);

    /** The write failed: its staged files are removed, the log is untouched. */
    void abort(String job, String messages, long batchId);
}
