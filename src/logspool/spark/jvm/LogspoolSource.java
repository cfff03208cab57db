package logspool.spark;

import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.catalog.constraints.Constraint;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.execution.datasources.DataSourceManager;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code format("logspool")} in a session that loaded the jar: the Python data source for
 * everything, except that a write's tasks run on the JVM (LogSink) when the driver's Python
 * process registered its commit (logspool.spark.register, write, write_stream).
 *
 * <p>Why a jar names itself "logspool" at all: Spark 4.3 resolves a format name to a jar's
 * DataSourceRegister before any Python data source ({@code DataSource.lookupDataSource}), so a
 * jar cannot add JVM tasks to the Python source's writes under its name without taking the name.
 * It takes it and hands everything back: this provider wraps Spark's own wrapper of a Python data
 * source ({@code PythonDataSourceV2}, the provider Spark itself would have made for the name),
 * looked up in the session's {@code DataSourceManager} as "logspool" (found by Spark in the module
 * pyspark_logspool, or registered) or, where a session could not register that name beside the
 * jar, "logspool-py" (logspool.spark.register's fallback). Schema inference, the table's
 * columns, capabilities, reads and streams are that table's, unchanged: the same rows, options,
 * errors, plans. Only {@link Table#newWriteBuilder} chooses:
 *
 * <ul>
 *   <li>the JVM writer (LogSink: tasks stage rows on the JVM, the commit is the Python writer's,
 *   called back in the driver's Python process) when that process registered its commit and the
 *   write is to a local directory (no {@code server} option; the daemon's writes are Python's);
 *   <li>the Python writer otherwise: a session whose driver's Python never registered the commit
 *   (a Scala or SQL session, or a Python one that did not import logspool.spark), exactly as
 *   without the jar.
 * </ul>
 *
 * Both writers check the same options with the same code and leave the same log (one batch
 * published at once; a stream's state keyed by the query's id), so which one ran is a matter of
 * speed, not of meaning. {@code format("logspool-py")}, where registered, is always the Python
 * source (logspool.spark.write(df, jvm=False)).
 */
public final class LogspoolSource implements TableProvider, DataSourceRegister {
    /** The names the Python data source may have in the session, in the order looked up. */
    static final String[] PYTHON_NAMES = {"logspool", "logspool-py"};

    // Made at first use, not in the constructor: Spark instantiates every DataSourceRegister on the
    // class path at each lookup of any format name, with no session needed.
    private PythonDataSourceV2 python;

    @Override
    public String shortName() {
        return "logspool";
    }

    private PythonDataSourceV2 python() {
        if (python == null) {
            DataSourceManager manager = org.apache.spark.sql.classic.SparkSession.active().sessionState()
                    .dataSourceManager();
            for (String name : PYTHON_NAMES) {
                if (manager.dataSourceExists(name)) {
                    PythonDataSourceV2 found = new PythonDataSourceV2();
                    found.setShortName(name);  // as DataSource.lookupDataSourceV2 does for its own
                    python = found;
                    return python;
                }
            }
            throw new IllegalArgumentException("[DATA_SOURCE_NOT_FOUND] format(\"logspool\"): the logspool jar is loaded "
                    + "but logspool's Python data source is not: install logspool with its spark extra for the "
                    + "driver's Python (Spark finds the module pyspark_logspool), or call "
                    + "logspool.spark.register(spark)");
        }
        return python;
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return python().inferSchema(options);
    }

    @Override
    public Transform[] inferPartitioning(CaseInsensitiveStringMap options) {
        return python().inferPartitioning(options);
    }

    @Override
    public boolean supportsExternalMetadata() {
        return true;  // as the Python source's: a write's table has the DataFrame's schema, a read's .schema(...)
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new Delegating(python().getTable(schema, partitioning, properties), properties);
    }

    /** The Python source's table, with the choice of writer. */
    static final class Delegating implements Table, SupportsRead, SupportsWrite {
        private final Table table;
        private final Map<String, String> properties;

        Delegating(Table table, Map<String, String> properties) {
            this.table = table;
            this.properties = properties;
        }

        @Override
        public String name() {
            return table.name();
        }

        @Override
        public String id() {
            return table.id();
        }

        @Override
        @SuppressWarnings("deprecation")
        public StructType schema() {
            return table.schema();
        }

        @Override
        public Column[] columns() {
            return table.columns();
        }

        @Override
        public Transform[] partitioning() {
            return table.partitioning();
        }

        @Override
        public Map<String, String> properties() {
            return table.properties();
        }

        @Override
        public Set<TableCapability> capabilities() {
            // The Python table's (batch and micro-batch reads, batch and streaming writes,
            // TRUNCATE so that overwrite reaches either writer's "append-only" error): the JVM
            // writer needs no other.
            return table.capabilities();
        }

        @Override
        public Constraint[] constraints() {
            return table.constraints();
        }

        @Override
        public String version() {
            return table.version();
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
            return ((SupportsRead) table).newScanBuilder(options);
        }

        @Override
        public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
            WriteCommitter committer = LogSink.driverCommitter();
            boolean served = new CaseInsensitiveStringMap(properties).containsKey("server");
            if (committer == null || served) {
                return ((SupportsWrite) table).newWriteBuilder(info);
            }
            return new LogSink(properties, committer, info.schema()).newWriteBuilder(info);
        }
    }
}
