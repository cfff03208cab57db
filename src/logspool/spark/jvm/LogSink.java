package logspool.spark;

import java.io.FileOutputStream;
import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.zip.CRC32;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.SupportsTruncate;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.Platform;

/**
 * The writer of a log on the JVM: {@code df.write} and {@code writeStream} through
 * {@code format("logspool-jvm")}, made by logspool.spark.write and write_stream, which pass the
 * option {@code committer}: the id of the Python commit (WriteCommitter) they registered; and
 * through {@code format("logspool")} where the jar is loaded (LogspoolSource), with the commit
 * the driver's Python registered last.
 *
 * <p>The tasks stage their rows as the Python writer's tasks do, in a file of the staged format
 * the commit reads (LSSTAGE3, src/logspool/spark/_source.py): the magic, then blocks of
 *
 * <pre>
 * offset  size     field
 * 0       4        row count n (u32, little-endian)
 * 4       4        data size d: the rows' bytes (u32)
 * 8       4        CRC-32 of the 8n + d bytes after this head (u32)
 * 12      4n       each row's size (u32)
 * 12+4n   4n       each row's CRC-32 (u32; FORMAT.md §3's CRC, java.util.zip.CRC32)
 * 12+8n   d        the rows' bytes, back to back
 * </pre>
 *
 * so no row passes through Python: the Python commit frames each block's records from the row
 * CRCs (by the CRC's linearity) and appends them under the writer lock, published at once. A
 * block holds at most {@link #BLOCK_ROWS} rows or {@link #BLOCK_BYTES} bytes of data (one larger
 * row is a block alone).
 *
 * <p>Durability: a streaming batch's files are fsynced, and their directory, before the task
 * reports success (the batch's intent names them; a replay appends them). A batch write's are
 * not: nothing reads them after a crash (a batch job is not replayed), and the commit checks each
 * file's size and each block's CRC before it publishes anything, so a file a crash cut or changed
 * fails the job instead of being published.
 */
final class LogSink implements Table, SupportsWrite {
    static final int BLOCK_ROWS = 10_000;  // as Spark's Arrow batches for the Python writer
    static final int BLOCK_BYTES = 4 << 20;
    static final byte[] MAGIC = "LSSTAGE3".getBytes(StandardCharsets.US_ASCII);
    static final String META_NAME = "meta";
    private static final ObjectMapper JSON = new ObjectMapper();

    /** The Python commits of this driver, by the id write and write_stream pass as the option
     * committer (one a Python process). */
    static final Map<String, WriteCommitter> COMMITTERS = new ConcurrentHashMap<>();

    private final Map<String, String> options;
    private final WriteCommitter committer;
    private final StructType schema;

    LogSink(Map<String, String> properties, StructType schema) {
        this.options = new TreeMap<>();
        for (Map.Entry<String, String> e : properties.entrySet()) {
            if (!e.getKey().equalsIgnoreCase("committer")) {
                options.put(e.getKey(), e.getValue());
            }
        }
        String id = properties.entrySet().stream().filter(e -> e.getKey().equalsIgnoreCase("committer"))
                .map(Map.Entry::getValue).findFirst().orElse(null);
        this.committer = id == null ? null : COMMITTERS.get(id);
        if (committer == null) {
            throw new IllegalStateException("logspool-jvm: a write is committed by the Python process that started it: "
                    + "use logspool.spark.write(df) or write_stream(df), not write.format(\"logspool-jvm\")");
        }
        this.schema = schema;
    }

    /** A write of {@code format("logspool")} (LogspoolSource) committed by the driver's Python. */
    LogSink(Map<String, String> properties, WriteCommitter committer, StructType schema) {
        this.options = new TreeMap<>(properties);
        this.committer = committer;
        this.schema = schema;
    }

    @Override
    public String name() {
        return "logspool-jvm " + options.getOrDefault("path", "");
    }

    @Override
    public StructType schema() {
        return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
        // ACCEPT_ANY_SCHEMA: the rows' payload column is all a write takes (the Python commit
        // checks it); TRUNCATE only so that overwrite reaches Builder.truncate and its message.
        return EnumSet.of(TableCapability.BATCH_WRITE, TableCapability.STREAMING_WRITE,
                TableCapability.ACCEPT_ANY_SCHEMA, TableCapability.TRUNCATE);
    }

    @Override
    public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
        return new Builder(info);
    }

    /** The last line of a Python error raised in a callback (its type and message). */
    static RuntimeException fromPython(RuntimeException e) {
        String text = e.getMessage() == null ? "" : e.getMessage().strip();
        int at = text.lastIndexOf('\n');
        String last = at < 0 ? text : text.substring(at + 1).strip();
        return new IllegalStateException(last.isEmpty() ? text : last, e);
    }

    final class Builder implements WriteBuilder, SupportsTruncate, Write {
        private final LogicalWriteInfo info;

        Builder(LogicalWriteInfo info) {
            this.info = info;
        }

        @Override
        public WriteBuilder truncate() {
            throw new IllegalArgumentException("OptionError: a log is append-only: use mode('append'), not overwrite");
        }

        @Override
        public Write build() {
            return this;
        }

        /** What a plan shows of the write (the physical plan's AppendData): the JVM writer's tasks. */
        @Override
        public String description() {
            return "logspool JVM writer " + options.getOrDefault("path", "");
        }

        @Override
        public String toString() {  // the physical plan's "Arguments" (PythonWrite's says "logspool")
            return description();
        }

        private Job open(boolean streaming) {
            String answer;
            try {
                answer = committer.open(JSON.writeValueAsString(options), info.schema().json(), info.queryId(),
                        streaming);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            } catch (RuntimeException e) {
                throw fromPython(e);
            }
            try {
                JsonNode node = JSON.readTree(answer);
                int column = info.schema().fieldIndex("payload");
                boolean binary = info.schema().fields()[column].dataType() instanceof BinaryType;
                return new Job(node.get("job").asText(), new Factory(options.get("path"),
                        node.get("staging").asText(), column, binary, streaming));
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }

        @Override
        public BatchWrite toBatch() {
            return open(false);
        }

        @Override
        public StreamingWrite toStreaming() {
            return open(true);
        }
    }

    /** One write's driver side: the tasks' factory, and the commit, which Python does. */
    final class Job implements BatchWrite, StreamingWrite {
        private final String id;
        private final Factory factory;

        Job(String id, Factory factory) {
            this.id = id;
            this.factory = factory;
        }

        @Override
        public String toString() {  // a streaming plan's "MicroBatchWrite[epoch: N, writer: ...]"
            return "logspool JVM writer " + factory.dir;
        }

        @Override
        public boolean useCommitCoordinator() {
            return true;  // one attempt of each task reports: its file is the one the commit names
        }

        @Override
        public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
            return factory;
        }

        @Override
        public StreamingDataWriterFactory createStreamingWriterFactory(PhysicalWriteInfo info) {
            return factory;
        }

        @Override
        public void commit(WriterCommitMessage[] messages) {
            call(true, messages, -1);
        }

        @Override
        public void abort(WriterCommitMessage[] messages) {
            call(false, messages, -1);
        }

        @Override
        public void commit(long epochId, WriterCommitMessage[] messages) {
            call(true, messages, epochId);
        }

        @Override
        public void abort(long epochId, WriterCommitMessage[] messages) {
            call(false, messages, epochId);
        }

        private void call(boolean commit, WriterCommitMessage[] messages, long batchId) {
            List<Object[]> staged = new ArrayList<>();
            for (WriterCommitMessage m : messages) {
                if (m instanceof Staged s) {
                    staged.add(new Object[] {s.partition, s.path, s.rows, s.bytes});
                }
            }
            String text;
            try {
                text = JSON.writeValueAsString(staged);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
            try {
                if (commit) {
                    committer.commit(id, text, batchId);
                } else {
                    committer.abort(id, text, batchId);
                }
            } catch (RuntimeException e) {
                throw fromPython(e);
            }
        }
    }

    /** What a task reports: its staged file, its rows and its bytes (the commit checks both). */
    static final class Staged implements WriterCommitMessage {
        private static final long serialVersionUID = 1L;
        final int partition;
        final String path;
        final long rows;
        final long bytes;

        Staged(int partition, String path, long rows, long bytes) {
            this.partition = partition;
            this.path = path;
            this.rows = rows;
            this.bytes = bytes;
        }
    }

    /** What every task needs: the log, the staging directory, the payload column. */
    static final class Factory implements DataWriterFactory, StreamingDataWriterFactory, Serializable {
        private static final long serialVersionUID = 1L;
        final String dir;
        final String staging;
        final int column;
        final boolean binary;
        final boolean durable;  // a stream's files: fsynced, their directory too

        Factory(String dir, String staging, int column, boolean binary, boolean durable) {
            this.dir = dir;
            this.staging = staging;
            this.column = column;
            this.binary = binary;
            this.durable = durable;
        }

        @Override
        public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
            return new TaskWriter(this, partitionId, taskId);
        }

        @Override
        public DataWriter<InternalRow> createWriter(int partitionId, long taskId, long epochId) {
            return new TaskWriter(this, partitionId, taskId);
        }
    }

    /**
     * One task's staging: rows copied into a block buffer with their sizes and CRC-32s, a block
     * written when full. The file is created at the first block (or the task's end), in the
     * staging directory the driver made; a task that finds neither it nor the log's {@code meta}
     * file runs where the log is not mounted, and says so.
     */
    static final class TaskWriter implements DataWriter<InternalRow> {
        private final Factory factory;
        private final int partition;
        private final long taskId;
        private final int[] sizes = new int[BLOCK_ROWS];
        private final int[] crcs = new int[BLOCK_ROWS];
        private byte[] data = new byte[BLOCK_BYTES];
        private ByteBuffer head = ByteBuffer.allocate(12 + 8 * BLOCK_ROWS).order(ByteOrder.LITTLE_ENDIAN);
        private final CRC32 crc = new CRC32();
        private int rows;  // in the block
        private int used;  // bytes of data in the block
        private long written;  // rows in blocks written
        private long bytes;  // of the file
        private Path path;
        private FileOutputStream out;

        TaskWriter(Factory factory, int partition, long taskId) {
            this.factory = factory;
            this.partition = partition;
            this.taskId = taskId;
        }

        @Override
        public void write(InternalRow row) throws IOException {
            int column = factory.column;
            if (row.isNullAt(column)) {
                throw new IllegalArgumentException("OptionError: row " + (written + rows) + " of partition "
                        + partition + ": payload is null");
            }
            Object base;
            long address;
            int size;
            if (row instanceof UnsafeRow unsafe) {  // the usual case: the bytes in place, no copy
                long offsetAndSize = unsafe.getLong(column);
                size = (int) offsetAndSize;
                base = unsafe.getBaseObject();
                address = unsafe.getBaseOffset() + (offsetAndSize >>> 32);
            } else {
                byte[] value = factory.binary ? row.getBinary(column) : row.getUTF8String(column).getBytes();
                size = value.length;
                base = value;
                address = Platform.BYTE_ARRAY_OFFSET;
            }
            if (rows == BLOCK_ROWS || (rows > 0 && used + size > data.length)) {
                flush();
            }
            if (size > data.length) {  // one row larger than a block: a block of its own
                data = new byte[size];
            }
            Platform.copyMemory(base, address, data, Platform.BYTE_ARRAY_OFFSET + used, size);
            crc.reset();
            crc.update(data, used, size);
            sizes[rows] = size;
            crcs[rows] = (int) crc.getValue();
            used += size;
            rows++;
        }

        private void open() throws IOException {
            Path staging = Path.of(factory.staging);
            if (!Files.isDirectory(staging)) {
                if (!Files.exists(Path.of(factory.dir, META_NAME))) {
                    throw new IOException("LogspoolError: " + factory.dir + ": this task cannot see the log it writes "
                            + "to: the log must be on a file system the driver and every executor mount at the same "
                            + "path");
                }
                if (!factory.durable) {
                    // A batch job's directory is renamed away when the job ends (committed, or
                    // aborted after another task failed: Spark does not wait for the others):
                    // a task still running then must not make it again and leave a file in it.
                    throw new IOException("LogspoolError: " + staging + ": the staging directory of this "
                            + "write is gone: the write ended (a task failed, and Spark does not wait for the "
                            + "others)");
                }
                Files.createDirectories(staging);  // a stream's, which stays between its batches
            }
            String name = String.format("%08d.%d.%s", partition, taskId, UUID.randomUUID().toString().replace("-", ""));
            path = staging.resolve(name);
            // Crash from here on: a file no commit names yet, removed with the staging directory
            // (a batch job's when it ends or aborts, a stream's after its next batch is done).
            out = new FileOutputStream(path.toFile());
            out.write(MAGIC);
            bytes = MAGIC.length;
        }

        private void flush() throws IOException {
            if (out == null) {
                open();
            }
            head.clear();
            head.putInt(rows).putInt(used).putInt(0);
            for (int i = 0; i < rows; i++) {
                head.putInt(sizes[i]);
            }
            for (int i = 0; i < rows; i++) {
                head.putInt(crcs[i]);
            }
            crc.reset();
            crc.update(head.array(), 12, 8 * rows);
            crc.update(data, 0, used);
            head.putInt(8, (int) crc.getValue());
            out.write(head.array(), 0, 12 + 8 * rows);
            out.write(data, 0, used);
            bytes += 12 + 8L * rows + used;
            written += rows;
            rows = 0;
            used = 0;
            if (data.length > BLOCK_BYTES) {
                data = new byte[BLOCK_BYTES];
            }
        }

        @Override
        public WriterCommitMessage commit() throws IOException {
            if (rows > 0 || out == null) {
                if (rows > 0) {
                    flush();
                } else {
                    open();
                }
            }
            if (factory.durable) {
                out.getFD().sync();  // crash before here: the intent does not name this file yet
            }
            out.close();
            out = null;
            if (factory.durable) {  // the file's name too: the intent will name it
                try (FileChannel d = FileChannel.open(path.getParent(), StandardOpenOption.READ)) {
                    d.force(true);
                }
            }
            return new Staged(partition, path.toString(), written, bytes);
        }

        @Override
        public void abort() throws IOException {
            close();
            if (path != null) {
                Files.deleteIfExists(path);  // a failed attempt's file: the commit never names it
            }
        }

        @Override
        public void close() throws IOException {
            if (out != null) {
                out.close();
                out = null;
            }
        }
    }

    /** The commit of the driver's Python process (one a driver JVM), once it registered one: the
     * writer of {@code format("logspool")} (LogspoolSource) runs its tasks on the JVM with it. */
    private static volatile WriteCommitter driver;

    /** Called by logspool.spark.register, write and write_stream (through Py4J): the Python commit. */
    static void register(String id, WriteCommitter committer) {
        COMMITTERS.put(id, committer);
        driver = committer;
    }

    static WriteCommitter driverCommitter() {
        return driver;
    }
}
