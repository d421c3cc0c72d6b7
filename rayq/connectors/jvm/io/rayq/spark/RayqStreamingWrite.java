package io.rayq.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;
import org.apache.spark.sql.types.StructType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * {@code df.writeStream.format("rayq")}: each micro-batch appended to a topic by its tasks
 * ({@link RayqWriter}, as a batch write), partition p of batch b as epoch b of the
 * idempotent producer {@code spark-<query id>-<p>}. The query id is Spark's persistent
 * one (kept in the checkpoint) and a batch re-run after a failure has its batch id, so
 * the broker drops what a re-run task or batch had appended: exactly once. Each batch's
 * plan (the partitions' queues, their brokers' nodes, ACL write grants) is rayq's Python
 * client's on the driver (connectors/stream_sink.py, through {@link Planners}).
 */
final class RayqStreamingWrite implements StreamingWrite {
  private static final Logger LOG = LoggerFactory.getLogger(RayqStreamingWrite.class);
  private final StructType schema;
  private final Map<String, String> options;
  private final String queryId;

  RayqStreamingWrite(StructType schema, Map<String, String> options, String queryId) {
    this.schema = schema;
    this.options = options;
    this.queryId = queryId;
  }

  @Override
  public StreamingDataWriterFactory createStreamingWriterFactory(PhysicalWriteInfo info) {
    Map<String, Object> args = new HashMap<>();
    args.put("query_id", queryId);
    args.put("partitions", info.numPartitions());
    JsonNode plan = Planners.call("sink.plan", options, args);
    Map<String, String> planned = new HashMap<>();
    for (Iterator<Map.Entry<String, JsonNode>> it = plan.fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> e = it.next();
      planned.put(e.getKey(), e.getValue().asText());
    }
    return new RayqWriterFactory(schema, planned);
  }

  @Override
  public boolean useCommitCoordinator() {
    return false; // a task's puts are idempotent: a second attempt adds nothing
  }

  @Override
  public void commit(long epochId, WriterCommitMessage[] messages) {
    long rows = 0;
    for (WriterCommitMessage m : messages) {
      rows += m == null ? 0 : ((RayqWriter.Committed) m).rows;
    }
    LOG.debug("rayq sink: batch {} of query {} wrote {} rows to {}", epochId, queryId, rows,
        options.get("topic"));
  }

  @Override
  public void abort(long epochId, WriterCommitMessage[] messages) {
    // Idempotent puts: a re-run of the batch adds only what this one did not append.
    LOG.info("rayq sink: batch {} of query {} aborted; a re-run appends only the rest",
        epochId, queryId);
  }
}
