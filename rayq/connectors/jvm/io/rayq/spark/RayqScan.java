package io.rayq.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Scan builder, scan and batch in one: the columns Spark asks for, and one input
 * partition per planned task. Option {@code tasks} is JSON, one list per task of
 * {@code [broker actor name, queue id, start, end]}.
 */
final class RayqScan implements ScanBuilder, SupportsPushDownRequiredColumns, Scan, Batch {
  private final CaseInsensitiveStringMap options;
  private StructType required;

  RayqScan(StructType schema, CaseInsensitiveStringMap options) {
    this.required = schema;
    this.options = options;
  }

  @Override
  public void pruneColumns(StructType requiredSchema) {
    required = requiredSchema;
  }

  @Override
  public Scan build() {
    return this;
  }

  @Override
  public StructType readSchema() {
    return required;
  }

  @Override
  public String description() {
    return "rayq topic=" + options.get("topic") + " columns=["
        + String.join(", ", required.fieldNames()) + "]";
  }

  @Override
  public Batch toBatch() {
    return this;
  }

  @Override
  public InputPartition[] planInputPartitions() {
    JsonNode tasks;
    try {
      tasks = new ObjectMapper().readTree(options.get("tasks"));
    } catch (IOException e) {
      throw new UncheckedIOException("rayq: option tasks is not valid JSON", e);
    }
    return RayqPartition.parse(tasks, options.get("topic"));
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new RayqReaderFactory(options.get("namespace"),
        Integer.parseInt(options.getOrDefault("page_bytes", "16777216")), required);
  }
}
