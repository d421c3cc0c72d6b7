package io.rayq.spark;

import java.util.Map;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A rayq topic's planned offset ranges as a Spark DataSource V2 table (rayq/spark.py makes
 * the options). Spark prunes the columns a query does not use; each task asks its brokers
 * (Python actors, through Ray's cross-language calls) for those columns only.
 */
public final class RayqSource implements TableProvider, DataSourceRegister {
  @Override
  public String shortName() {
    return "rayq";
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    throw new IllegalArgumentException(
        "rayq: the schema comes from rayq.connectors.spark.read; use it instead of format(\"rayq\")");
  }

  @Override
  public boolean supportsExternalMetadata() {
    return true;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> props) {
    return new RayqTable(schema);
  }
}
