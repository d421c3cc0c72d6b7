package io.rayq.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.ray.api.ObjectRef;
import io.ray.api.PyActorHandle;
import io.ray.api.Ray;
import io.ray.api.function.PyActorMethod;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.channels.Channels;
import java.nio.channels.WritableByteChannel;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamWriter;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.execution.arrow.ArrowWriter;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One task's rows to one queue: Arrow batches of about {@code put_bytes} of rows (as
 * Spark holds them: {@code UnsafeRow} sizes), each sent with
 * the broker method {@code put_arrow} (actors/broker.py), which encodes and appends them
 * as the idempotent batches of producer {@code spark-<write id>-<partition>} (or epoch
 * {@code <batch>} of it, {@code ~<batch>}: a micro-batch) from the sequence number of the
 * batch's first row. With ACL on, each put carries the partition's write grant, signed by
 * the driver. Batches are cut by the rows' sizes alone, so
 * a re-run task sends the same batches and the broker drops those it has. Up to
 * {@code in_flight} puts are in flight; a put that fails with a retriable rayq error is
 * sent again after a back-off, with the puts behind it, in order (the broker refuses a
 * batch that arrives before an earlier one of its producer).
 *
 * <p>A task on its broker's node writes each batch into a shared-memory slot
 * ({@link SharedSlots}) and names it in the request, instead of sending the bytes
 * through Ray's object store. When the broker cannot read the slot (it answers {@code
 * "resend"}: it restarted, say) the puts in flight are sent again with their rows, and
 * the task's later puts go through Ray.
 */
final class RayqWriter implements DataWriter<InternalRow> {
  private static final PyActorMethod<byte[]> PUT = PyActorMethod.of("put_arrow", byte[].class);
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Logger LOG = LoggerFactory.getLogger(RayqWriter.class);
  private static final long BACKOFF_MS = 100;
  private static final int ROW_BYTES = 1024; // a row's size when Spark does not say it
  private static final String[] RETRIABLE = {
    "BrokerBusyError", "BrokerUnavailableError", "DiskFullError", "RayActorException",
  };

  /** What a task tells the driver: the rows it wrote. */
  static final class Committed implements WriterCommitMessage {
    private static final long serialVersionUID = 1L;
    final long rows;

    Committed(long rows) {
      this.rows = rows;
    }
  }

  /** A put in flight: its request and rows (or slot), kept to send them again. */
  private static final class Put {
    final long first;
    byte[] request;
    byte[] rows;
    SharedSlots.Slot slot;
    ObjectRef<byte[]> reply;

    Put(long first, byte[] request, byte[] rows, SharedSlots.Slot slot) {
      this.first = first;
      this.request = request;
      this.rows = rows;
      this.slot = slot;
    }
  }

  private static final byte[] NO_ROWS = new byte[0];

  private final Map<String, String> options;
  private final String producerId;
  private final String actor;
  private final int queueId;
  private final long putBytes;
  private final int inFlight;
  private final int attempts;
  private final ArrowWriter arrow;
  private final JsonNode grant; // the driver's signed WriteGrant (ACL), or null
  private final int[] ordinals; // the columns written, in the row
  private final DataType[] types;
  private final GenericInternalRow projected; // null: every column is written
  private final ArrayDeque<Put> puts = new ArrayDeque<>();
  private String rowsDir; // slots here when the broker is on this node, else ""
  private PyActorHandle broker;
  private long nextSequence;
  private long batchFirst;
  private int batchRows;
  private long batchBytes;
  private long written;

  /**
   * Partition {@code partitionId}'s writer; {@code epoch}: the micro-batch (a stream's
   * writes: producer {@code spark-<write id>-<partition>~<epoch>}, one epoch of the
   * partition's producer), or -1 (the option {@code batch_id} if given, else none).
   */
  RayqWriter(StructType schema, Map<String, String> options, int partitionId, long epoch) {
    this.options = options;
    if (epoch < 0 && options.containsKey("batch_id")) {
      epoch = Long.parseLong(options.get("batch_id"));
    }
    String family = "spark-" + options.get("write_id") + "-" + partitionId;
    this.producerId = epoch < 0 ? family : family + "~" + epoch;
    JsonNode targets = parse(options.get("targets"));
    JsonNode target = targets.get(partitionId % targets.size());
    this.actor = target.get(0).asText();
    this.queueId = target.get(1).asInt();
    String node = target.size() > 2 ? target.get(2).asText() : "";
    String signed = target.size() > 3 ? target.get(3).asText() : "";
    this.grant = signed.isEmpty() ? null : parse(signed);
    boolean local = !node.isEmpty()
        && node.equalsIgnoreCase(Ray.getRuntimeContext().getCurrentNodeId().toString());
    this.rowsDir = local ? options.getOrDefault("rows_dir", "") : "";
    this.putBytes = Long.parseLong(options.get("put_bytes"));
    this.inFlight = Integer.parseInt(options.get("in_flight"));
    this.attempts = Integer.parseInt(options.get("attempts"));
    this.ordinals = ordinals(schema, options);
    this.types = new DataType[ordinals.length];
    StructType written = new StructType();
    for (int i = 0; i < ordinals.length; i++) {
      types[i] = schema.fields()[ordinals[i]].dataType();
      written = written.add(schema.fields()[ordinals[i]]);
    }
    boolean all = ordinals.length == schema.size();
    for (int i = 0; all && i < ordinals.length; i++) {
      all = ordinals[i] == i;
    }
    this.projected = all ? null : new GenericInternalRow(new Object[ordinals.length]);
    this.arrow = ArrowWriter.create(all ? schema : written, "UTC", true);
  }

  /** The ordinals of the message's columns (options body .. properties) in {@code schema}. */
  private static int[] ordinals(StructType schema, Map<String, String> options) {
    List<Integer> out = new ArrayList<>();
    for (String role : new String[] {"body", "keys", "tags", "properties"}) {
      String column = options.get(role);
      if (column != null && !out.contains(schema.fieldIndex(column))) {
        out.add(schema.fieldIndex(column));
      }
    }
    Collections.sort(out);
    return out.stream().mapToInt(Integer::intValue).toArray();
  }

  private static JsonNode parse(String json) {
    try {
      return JSON.readTree(json);
    } catch (IOException e) {
      throw new IllegalArgumentException("rayq: option targets is not valid JSON", e);
    }
  }

  @Override
  public void write(InternalRow row) throws IOException {
    if (projected == null) {
      arrow.write(row);
    } else { // a stream's rows carry more columns than the message's: those only
      Object[] values = projected.values();
      for (int i = 0; i < ordinals.length; i++) {
        values[i] = row.isNullAt(ordinals[i]) ? null : row.get(ordinals[i], types[i]);
      }
      arrow.write(projected);
    }
    nextSequence++;
    batchRows++;
    batchBytes += row instanceof UnsafeRow ? ((UnsafeRow) row).getSizeInBytes() : ROW_BYTES;
    if (batchBytes >= putBytes) {
      send();
    }
  }

  private long arrowBytes() {
    long bytes = 0;
    for (FieldVector v : arrow.root().getFieldVectors()) {
      bytes += v.getBufferSize();
    }
    return bytes;
  }

  /** The rows so far as one put (in flight; the oldest awaited when there are too many). */
  private void send() throws IOException {
    arrow.finish();
    VectorSchemaRoot root = arrow.root();
    long size = arrowBytes() + 4096;
    SharedSlots.Slot slot = rowsDir.isEmpty() ? null
        : SharedSlots.acquire(rowsDir, actor, size);
    Put put;
    if (slot != null && intoSlot(root, slot)) {
      put = new Put(batchFirst, request(batchFirst, slot), NO_ROWS, slot);
    } else {
      ByteArrayOutputStream out = new ByteArrayOutputStream((int) Math.min(size,
          Integer.MAX_VALUE - 16)); // the whole stream: no copy while it grows
      writeStream(root, Channels.newChannel(out));
      put = new Put(batchFirst, request(batchFirst, null), out.toByteArray(), null);
    }
    arrow.reset();
    batchFirst = nextSequence;
    batchRows = 0;
    batchBytes = 0;
    launch(put);
    puts.addLast(put);
    while (puts.size() >= inFlight) {
      awaitOldest();
    }
  }

  /** Writes the batch into {@code slot}; false (the slot freed) when it does not fit. */
  private boolean intoSlot(VectorSchemaRoot root, SharedSlots.Slot slot) {
    try {
      writeStream(root, slot.writer());
      return true;
    } catch (IOException e) {
      SharedSlots.release(actor, slot);
      return false;
    }
  }

  /** The batch as one Arrow IPC stream (schema, batch, end) into {@code out}. */
  private static void writeStream(VectorSchemaRoot root, WritableByteChannel out)
      throws IOException {
    try (ArrowStreamWriter writer = new ArrowStreamWriter(root, null, out)) {
      writer.start();
      writer.writeBatch();
      writer.end();
    }
  }

  private byte[] request(long first, SharedSlots.Slot slot) throws IOException {
    Map<String, Object> req = new LinkedHashMap<>();
    req.put("topic", options.get("topic"));
    req.put("queue_id", queueId);
    req.put("producer_id", producerId);
    req.put("first_sequence", first);
    req.put("group", options.get("group"));
    for (String column : new String[] {"body", "keys", "tags", "properties"}) {
      if (options.containsKey(column)) {
        req.put(column, options.get(column));
      }
    }
    if (slot != null) {
      req.put("rows_file", slot.path.toString());
      req.put("rows_length", slot.length);
    }
    if (grant != null) {
      req.put("grant", grant);
    }
    return JSON.writeValueAsBytes(req);
  }

  private void launch(Put put) {
    put.reply = broker().task(PUT, put.request, put.rows).remote();
  }

  private PyActorHandle broker() {
    if (broker == null) {
      broker = Brokers.find(actor, options.get("namespace"));
    }
    return broker;
  }

  /** Waits for the oldest put; on a retriable failure sends it and those behind it again. */
  private void awaitOldest() throws IOException {
    for (int attempt = 1; ; attempt++) {
      Put put = puts.peekFirst();
      try {
        JsonNode reply = JSON.readTree(put.reply.get());
        if (put.slot != null && reply.path("resend").asBoolean()) {
          LOG.info("put of {} from sequence {}: {} cannot read its slot; sending the rows "
              + "through Ray", producerId, put.first, actor);
          throughRay();
          attempt--;
          continue;
        }
        written += reply.get("rows").asLong();
        puts.removeFirst();
        if (put.slot != null) {
          SharedSlots.release(actor, put.slot);
        }
        return;
      } catch (RuntimeException e) {
        if (attempt >= attempts || !retriable(e)) {
          throw e;
        }
        long backoff = Math.min(BACKOFF_MS << (attempt - 1), 5_000L);
        LOG.info("put of {} from sequence {} to {} failed ({}); again in {} ms, with the {} "
            + "behind it", producerId, put.first, actor, e.getMessage(), backoff,
            puts.size() - 1);
        sleep(backoff);
        for (Put again : puts) {
          launch(again);
        }
      }
    }
  }

  /** Every put in flight sent again with its rows, in order; no more slots for this task. */
  private void throughRay() throws IOException {
    rowsDir = "";
    for (Put put : puts) {
      if (put.slot != null) {
        put.rows = put.slot.copy();
        SharedSlots.discard(put.slot);
        put.slot = null;
        put.request = request(put.first, null);
      }
      launch(put);
    }
  }

  private static boolean retriable(Throwable e) {
    for (String name : RETRIABLE) {
      if (matches(e, name)) {
        return true;
      }
    }
    return false;
  }

  private static boolean matches(Throwable e, String name) {
    for (Throwable t = e; t != null; t = t.getCause()) {
      if ((t.getClass().getName() + " " + t.getMessage()).contains(name)) {
        return true;
      }
    }
    return false;
  }

  private static void sleep(long ms) {
    try {
      Thread.sleep(ms);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("rayq: interrupted while retrying a put", e);
    }
  }

  @Override
  public WriterCommitMessage commit() throws IOException {
    if (batchRows > 0) {
      send();
    }
    while (!puts.isEmpty()) {
      awaitOldest();
    }
    return new Committed(written);
  }

  @Override
  public void abort() {
    for (Put put : puts) {
      if (put.slot != null) {
        SharedSlots.discard(put.slot); // its broker may still be reading it
      }
    }
    puts.clear();
  }

  @Override
  public void close() {
    arrow.root().close();
  }
}
