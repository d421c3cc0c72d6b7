package io.rayq.spark;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.ray.api.ObjectRef;
import io.ray.api.PyActorHandle;
import io.ray.api.Ray;
import io.ray.api.function.PyActorMethod;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.IntVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamReader;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Reads a task's ranges page by page with the method {@code read_arrow_ipc} of the actor
 * the plan names for each (a broker's page reader: actors/page_reader.py), whose one
 * argument is a {@code ReadArrowRequest} as JSON. A page is a little-endian header (next
 * offset, row count) and, when columns were asked for, an Arrow IPC stream of those
 * columns. The next page is asked for before this one is handed to Spark.
 *
 * <p>The requests name this executor's Ray node: a page reader on the same node leaves
 * the records in its commit-log files (the page names the runs of records and where each
 * record starts), and {@link CommitLogRuns} reads and checks them here, for a count too.
 * When it cannot (a file gone, a record that fails its check), the page is asked for
 * again whole.
 */
final class RayqReader implements PartitionReader<ColumnarBatch> {
  private static final PyActorMethod<byte[]> READ =
      PyActorMethod.of("read_arrow_ipc", byte[].class);
  private static final int HEADER = 16;
  private static final int MAX_FAILED_PAGES = 4; // then this task asks for whole pages
  private static final ObjectMapper JSON = new ObjectMapper();

  private final String namespace;
  private final int pageBytes;
  private final StructType required;
  private final List<String> columns;
  private final Iterator<RayqPartition.Range> ranges;
  private final Map<String, PyActorHandle> brokers = new HashMap<>();
  private final BufferAllocator allocator = new RootAllocator(Long.MAX_VALUE);
  private final CommitLogRuns files = new CommitLogRuns();
  private final String node = Ray.getRuntimeContext().getCurrentNodeId().toString();

  private RayqPartition.Range range;
  private long offset;
  private ObjectRef<byte[]> pending;
  private ArrowStreamReader stream;
  private ColumnarBatch batch;
  private int failedPages;

  RayqReader(String namespace, int pageBytes, StructType required,
      RayqPartition partition) {
    this.namespace = namespace;
    this.pageBytes = pageBytes;
    this.required = required;
    this.columns = List.of(required.fieldNames());
    this.ranges = partition.ranges.iterator();
  }

  @Override
  public boolean next() throws IOException {
    release();
    while (true) {
      if (pending == null && !advance()) {
        return false;
      }
      byte[] page = pending.get();
      pending = null;
      long start = offset;
      ByteBuffer head = ByteBuffer.wrap(page, 0, HEADER).order(ByteOrder.LITTLE_ENDIAN);
      long next = head.getLong(0);
      int rows = (int) head.getLong(8);
      if (next <= offset) {
        throw new IllegalStateException("rayq.errors.BrokerUnavailableError: " + range.topic + "/"
            + range.queueId + " on " + range.actor + " stopped at offset " + offset
            + " before the planned end " + range.end);
      }
      offset = next;
      if (offset < range.end) {
        pending = ask(true);
      }
      if (rows == 0) {
        continue;
      }
      batch = decode(page, rows);
      if (batch == null) { // records that cannot be read here: the page again, whole (the
        offset = start; // next page asked for above is dropped)
        failedPages++;
        pending = ask(false);
        continue;
      }
      return true;
    }
  }

  /** Starts the next non-empty range; false when there is none. */
  private boolean advance() {
    while (ranges.hasNext()) {
      range = ranges.next();
      offset = range.start;
      if (offset < range.end) {
        pending = ask(true);
        return true;
      }
    }
    return false;
  }

  /**
   * Asks for the page at {@code offset}; {@code local}: its records may be left in the
   * files (not after {@code MAX_FAILED_PAGES} such pages this task could not read).
   */
  private ObjectRef<byte[]> ask(boolean local) {
    local = local && failedPages < MAX_FAILED_PAGES;
    Map<String, Object> req = new LinkedHashMap<>();
    req.put("topic", range.topic);
    req.put("queue_id", range.queueId);
    req.put("start", offset);
    req.put("end", range.end);
    req.put("max_bytes", pageBytes);
    req.put("columns", columns);
    req.put("local_node", local ? node : "");
    try {
      if (!range.grant.isEmpty()) { // ACL: the range's grant, signed by the driver
        req.put("grant", JSON.readTree(range.grant));
      }
      return broker(range.actor).task(READ, JSON.writeValueAsBytes(req)).remote();
    } catch (JsonProcessingException e) {
      throw new IllegalStateException("rayq: cannot encode a read request", e);
    }
  }

  private PyActorHandle broker(String actor) {
    return brokers.computeIfAbsent(actor, name -> Brokers.find(name, namespace));
  }

  /**
   * The page as a batch; null when its records are in files that cannot be read and
   * checked here (every record of such a page is checked, whatever the columns).
   */
  private ColumnarBatch decode(byte[] page, int rows) throws IOException {
    StructField[] fields = required.fields();
    ColumnVector[] vectors = new ColumnVector[fields.length];
    if (page.length == HEADER) { // a count from a broker: no columns
      return new ColumnarBatch(vectors, rows);
    }
    stream = new ArrowStreamReader(
        new ByteArrayInputStream(page, HEADER, page.length - HEADER), allocator);
    stream.loadNextBatch();
    VectorSchemaRoot root = stream.getVectorSchemaRoot();
    Map<String, String> meta = root.getSchema().getCustomMetadata();
    BodyVector bodies = null;
    if (meta != null && "in-files".equals(meta.get("rayq.records"))) {
      bodies = records(meta, (IntVector) root.getVector("record_at"), rows);
      if (bodies == null) {
        release();
        return null;
      }
    }
    for (int i = 0; i < fields.length; i++) {
      boolean inFiles = bodies != null && fields[i].name().equals("body");
      vectors[i] = inFiles ? bodies : new ArrowColumnVector(root.getVector(fields[i].name()));
    }
    return new ColumnarBatch(vectors, rows);
  }

  /** The page's records read from the files and checked, as their bodies; null: not here. */
  private BodyVector records(Map<String, String> meta, IntVector recordAt, int rows)
      throws IOException {
    int[] at = new int[rows];
    for (int i = 0; i < rows; i++) {
      at[i] = recordAt.get(i);
    }
    return files.load(meta.get("rayq.commitlog"),
        Long.parseLong(meta.get("rayq.segment_size")), meta.get("rayq.runs"), at);
  }

  private void release() throws IOException {
    batch = null;
    if (stream != null) {
      stream.close();
      stream = null;
    }
  }

  @Override
  public ColumnarBatch get() {
    return batch;
  }

  @Override
  public void close() throws IOException {
    release();
    files.close();
    allocator.close();
  }
}
