package io.rayq.spark;

import java.util.Map;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * rayq as a Spark data source, {@code format("rayq")}. Users' tables are topics, read with
 * {@code readStream} ({@link RayqMicroBatch}) and written with {@code writeStream}; their
 * options are checked by rayq's Python client on the driver when the table is made (at
 * {@code load()} and {@code start()}). rayq/connectors/spark.py's batch read and write
 * use the same classes with options it plans itself (option {@code tasks} or
 * {@code targets}). Spark prunes the columns a query does not use; each task asks its
 * brokers (Python actors, through Ray's cross-language calls) for those columns only.
 */
public final class RayqSource implements TableProvider, DataSourceRegister {
  /** The columns of a message, as rayq.connectors.spark.spark_schema() has them. */
  static final StructType SCHEMA = new StructType()
      .add("topic", DataTypes.StringType)
      .add("broker", DataTypes.StringType)
      .add("queue_id", DataTypes.IntegerType)
      .add("queue_offset", DataTypes.LongType)
      .add("msg_id", DataTypes.StringType)
      .add("tags", DataTypes.StringType)
      .add("keys", DataTypes.createArrayType(DataTypes.StringType))
      .add("body", DataTypes.BinaryType, false)
      .add("properties", DataTypes.createMapType(DataTypes.StringType, DataTypes.StringType))
      .add("born_timestamp", DataTypes.TimestampType)
      .add("store_timestamp", DataTypes.TimestampType)
      .add("reconsume_times", DataTypes.IntegerType);

  @Override
  public String shortName() {
    return "rayq";
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return SCHEMA;
  }

  @Override
  public boolean supportsExternalMetadata() {
    return true;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> props) {
    if (props.containsKey("tasks") || props.containsKey("targets")) { // planned in Python
      return new RayqTable(schema, false);
    }
    if (writing()) { // writeStream's start(): the sink's checks, against the query's columns
      Planners.call("sink.check", props, Map.of("schema", schema.json()));
      return new RayqTable(schema, true);
    }
    Planners.call("source.check", props, Map.of()); // a clear error at load() or start()
    return new RayqTable(schema == null ? SCHEMA : schema, true);
  }

  /**
   * Whether Spark makes the table for a {@code writeStream} ({@code DataStreamWriter.start}):
   * getTable is told nothing else of the direction (Spark passes the query's schema, as
   * {@link #supportsExternalMetadata} allows, where a read passes {@link #inferSchema}'s).
   */
  private static boolean writing() {
    return StackWalker.getInstance().walk(
        frames -> frames.anyMatch(f -> f.getClassName().endsWith(".DataStreamWriter")));
  }
}
