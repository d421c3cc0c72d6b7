package io.rayq.spark;

import java.util.EnumSet;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A topic: its messages (a stream, or the ranges rayq/connectors/spark.py planned) and its
 * queues (appended to). {@code streaming}: made from a user's options (readStream and
 * writeStream), not from a plan.
 */
final class RayqTable implements SupportsRead, SupportsWrite {
  private final StructType schema;
  private final boolean streaming;

  RayqTable(StructType schema, boolean streaming) {
    this.schema = schema;
    this.streaming = streaming;
  }

  @Override
  public String name() {
    return "rayq";
  }

  @Override
  public StructType schema() {
    return schema;
  }

  @Override
  public Set<TableCapability> capabilities() {
    if (streaming) {
      return EnumSet.of(
          TableCapability.MICRO_BATCH_READ, TableCapability.BATCH_READ, TableCapability.STREAMING_WRITE);
    }
    return EnumSet.of(TableCapability.BATCH_READ, TableCapability.BATCH_WRITE);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    if (streaming) {
      return new RayqMicroBatch(schema, options.asCaseSensitiveMap());
    }
    return new RayqScan(schema, options);
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    return new RayqWrite(info.schema(), info.options(), info.queryId());
  }
}
