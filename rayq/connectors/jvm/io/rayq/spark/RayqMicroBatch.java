package io.rayq.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadAllAvailable;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl;
import org.apache.spark.sql.types.StructType;

/**
 * {@code spark.readStream.format("rayq")}: a micro-batch stream over the queues of one or
 * more topics. Its offsets are per topic, broker and queue ({@link RayqOffset}), kept in
 * the query's checkpoint. Planning (where a batch ends, which tasks read what, data loss,
 * the optional group commit) is rayq's Python client's on the driver
 * (connectors/stream_source.py, through {@link Planners}); the tasks read their ranges as
 * the batch reader does ({@link RayqReader}). {@code maxMessagesPerTrigger} caps a batch
 * (admission control). As a batch scan ({@code spark.read.format("rayq")}) it reads from
 * {@code startingOffsets} (default: earliest) to {@code endingOffsets} (default: latest).
 */
final class RayqMicroBatch
    implements ScanBuilder, SupportsPushDownRequiredColumns, Scan, MicroBatchStream,
        SupportsAdmissionControl, Batch {
  private final Map<String, String> options;
  private StructType required;
  private String namespace;
  private String plannedFor; // the batch (start|end) the last plan is of
  private InputPartition[] planned;

  RayqMicroBatch(StructType schema, Map<String, String> options) {
    this.required = schema;
    this.options = options;
  }

  // ------------------------------------------------------------------ scan
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
    String topics = options.getOrDefault("topic", options.getOrDefault("topicPattern", ""));
    return "rayq stream topic=" + topics + " columns=[" + String.join(", ", required.fieldNames())
        + "]";
  }

  @Override
  public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
    return this;
  }

  @Override
  public Batch toBatch() {
    return this;
  }

  @Override
  public InputPartition[] planInputPartitions() {
    JsonNode plan = Planners.call("source.batch", options, Map.of());
    namespace = plan.get("namespace").asText();
    return RayqPartition.parse(plan.get("tasks"), null);
  }

  // --------------------------------------------------------------- offsets
  @Override
  public Offset initialOffset() {
    return new RayqOffset(Planners.call("source.initial", options, Map.of()).asText());
  }

  @Override
  public Offset deserializeOffset(String json) {
    return new RayqOffset(
        Planners.call("source.validate", options, Map.of("offsets", json)).asText());
  }

  @Override
  public ReadLimit getDefaultReadLimit() {
    String max = caseless("maxMessagesPerTrigger");
    return max == null ? ReadLimit.allAvailable() : ReadLimit.maxRows(Long.parseLong(max.trim()));
  }

  @Override
  public Offset latestOffset() {
    throw new UnsupportedOperationException("rayq: latestOffset(start, limit) is the one used");
  }

  @Override
  public Offset latestOffset(Offset start, ReadLimit limit) {
    long maxRows = 0;
    if (limit instanceof ReadMaxRows) {
      maxRows = ((ReadMaxRows) limit).maxRows();
    } else if (!(limit instanceof ReadAllAvailable)) {
      throw new UnsupportedOperationException("rayq: read limit " + limit + " is not supported");
    }
    Map<String, Object> args = new HashMap<>();
    args.put("start", start == null ? "{}" : start.json());
    args.put("max_rows", maxRows);
    return new RayqOffset(Planners.call("source.latest", options, args).asText());
  }

  // ----------------------------------------------------------------- batches
  @Override
  public InputPartition[] planInputPartitions(Offset start, Offset end) {
    String key = (start == null ? "" : start.json()) + "|" + end.json();
    if (key.equals(plannedFor)) { // Spark asks again for the same batch while planning it
      return planned;
    }
    Map<String, Object> args = new HashMap<>();
    args.put("start", start == null ? "" : start.json());
    args.put("end", end.json());
    JsonNode plan = Planners.call("source.plan", options, args);
    namespace = plan.get("namespace").asText();
    planned = RayqPartition.parse(plan.get("tasks"), null);
    plannedFor = key;
    return planned;
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    if (namespace == null) { // planned before this call in every batch; asked again if not
      namespace = Planners.call("source.namespace", options, Map.of()).asText();
    }
    String pageBytes = caseless("pageBytes");
    return new RayqReaderFactory(
        namespace, pageBytes == null ? 16 << 20 : Integer.parseInt(pageBytes.trim()), required);
  }

  @Override
  public void commit(Offset end) {
    Planners.call("source.commit", options, Map.of("end", end.json()));
  }

  @Override
  public void stop() {}

  private String caseless(String key) {
    for (Map.Entry<String, String> e : options.entrySet()) {
      if (e.getKey().equalsIgnoreCase(key)) {
        return e.getValue();
      }
    }
    return null;
  }
}
