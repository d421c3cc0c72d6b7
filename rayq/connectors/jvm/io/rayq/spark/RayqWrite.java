package io.rayq.spark;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.SupportsTruncate;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.apache.spark.sql.internal.connector.SupportsStreamingUpdateAsAppend;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * An append of a DataFrame's rows to a topic (rayq/spark.py makes the options): each task
 * writes its partition to one queue as an idempotent producer (RayqWriter). The rows
 * written are kept under the option {@code call_id} for the driver to collect
 * ({@link #written}). A stream's appends are {@link #toStreaming}'s. As Kafka's sink, a
 * stream in update mode appends its updated rows, and one in complete mode appends the
 * whole result every batch (a topic is never truncated).
 */
public final class RayqWrite
    implements WriteBuilder, SupportsTruncate, SupportsStreamingUpdateAsAppend, Write,
        BatchWrite {
  private static final Map<String, Long> WRITTEN = new ConcurrentHashMap<>();
  private final StructType schema;
  private final CaseInsensitiveStringMap options;
  private final String queryId;

  RayqWrite(StructType schema, CaseInsensitiveStringMap options, String queryId) {
    this.schema = schema;
    this.options = options;
    this.queryId = queryId;
  }

  /** The rows the write of option {@code call_id} wrote (-1 if not committed); forgotten after. */
  public static long written(String callId) {
    Long rows = WRITTEN.remove(callId);
    return rows == null ? -1 : rows;
  }

  @Override
  public WriteBuilder truncate() {
    return this; // complete mode: the whole result again, appended (as Kafka's sink)
  }

  @Override
  public Write build() {
    return this;
  }

  @Override
  public String description() {
    return "rayq topic=" + options.get("topic");
  }

  @Override
  public BatchWrite toBatch() {
    return this;
  }

  @Override
  public StreamingWrite toStreaming() {
    return new RayqStreamingWrite(schema, options.asCaseSensitiveMap(), queryId);
  }

  @Override
  public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
    return new RayqWriterFactory(schema, options.asCaseSensitiveMap());
  }

  @Override
  public boolean useCommitCoordinator() {
    return false; // a task's puts are idempotent: a second attempt adds nothing
  }

  @Override
  public void commit(WriterCommitMessage[] messages) {
    long rows = 0;
    for (WriterCommitMessage m : messages) {
      rows += ((RayqWriter.Committed) m).rows;
    }
    WRITTEN.put(options.getOrDefault("call_id", options.get("write_id")), rows);
  }

  @Override
  public void abort(WriterCommitMessage[] messages) {
    // Idempotent puts: what a failed write appended stays, as with any producer.
  }
}
