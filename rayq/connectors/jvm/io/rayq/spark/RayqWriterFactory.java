package io.rayq.spark;

import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.types.StructType;

/**
 * Ships the schema and options to the executors; one RayqWriter per task: of a batch
 * write, or of a stream's micro-batch (its epoch, the batch id, in the producer id).
 */
final class RayqWriterFactory implements DataWriterFactory, StreamingDataWriterFactory {
  private static final long serialVersionUID = 1L;
  private final StructType schema;
  private final HashMap<String, String> options;

  RayqWriterFactory(StructType schema, Map<String, String> options) {
    this.schema = schema;
    this.options = new HashMap<>(options);
  }

  @Override
  public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
    return new RayqWriter(schema, options, partitionId, -1);
  }

  @Override
  public DataWriter<InternalRow> createWriter(int partitionId, long taskId, long epochId) {
    return new RayqWriter(schema, options, partitionId, epochId);
  }
}
