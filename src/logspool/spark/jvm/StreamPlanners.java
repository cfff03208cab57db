package logspool.spark;

/** What logspool.spark.load_stream registers for a streaming DataFrame: a planner of its own for
 * each query started from it (a query's planner holds that query's availableNow target). */
public interface StreamPlanners {
    StreamPlanner open();
}
