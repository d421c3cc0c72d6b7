package io.rayq.spark;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * An append of a DataFrame's rows to a topic (rayq/spark.py makes the options): each task
 * writes its partition to one queue as an idempotent producer (RayqWriter). The rows
 * written are kept under the option {@code write_id} for the driver to collect
 * ({@link #written}).
 */
public final class RayqWrite implements WriteBuilder, Write, BatchWrite {
  private static final Map<String, Long> WRITTEN = new ConcurrentHashMap<>();
  private final StructType schema;
  private final CaseInsensitiveStringMap options;

  RayqWrite(StructType schema, CaseInsensitiveStringMap options) {
    this.schema = schema;
    this.options = options;
  }

  /** The rows the write {@code writeId} wrote (-1 if it did not commit); forgotten after. */
  public static long written(String writeId) {
    Long rows = WRITTEN.remove(writeId);
    return rows == null ? -1 : rows;
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
    WRITTEN.put(options.get("write_id"), rows);
  }

  @Override
  public void abort(WriterCommitMessage[] messages) {
    // Idempotent puts: what a failed write appended stays, as with any producer.
  }
}
