package io.rayq.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** Columnar readers only: the brokers answer in Arrow. */
final class RayqReaderFactory implements PartitionReaderFactory {
  private static final long serialVersionUID = 1L;
  private final String namespace;
  private final int pageBytes;
  private final StructType required;

  RayqReaderFactory(String namespace, int pageBytes, StructType required) {
    this.namespace = namespace;
    this.pageBytes = pageBytes;
    this.required = required;
  }

  @Override
  public boolean supportColumnarReads(InputPartition partition) {
    return true;
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    throw new UnsupportedOperationException("rayq reads columnar batches only");
  }

  @Override
  public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
    return new RayqReader(namespace, pageBytes, required, (RayqPartition) partition);
  }
}
