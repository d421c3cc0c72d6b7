package io.rayq.spark;

import java.util.Collections;
import java.util.List;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.functions;

/**
 * Whether a DataFrame's column holds a null, in one Spark job of one stage: each task
 * stops at the first null of its partition (rayq/spark.py checks the body column before a
 * write, so that nothing is written when one is null).
 */
public final class NullCheck {
  private NullCheck() {}

  /** True if {@code column} of {@code df} has a null. */
  public static boolean hasNull(Dataset<Row> df, String column) {
    List<Boolean> found = df.where(functions.col(column).isNull())
        .queryExecution().toRdd().toJavaRDD()
        .mapPartitions(rows -> Collections.singletonList(rows.hasNext()).iterator())
        .collect();
    return found.contains(Boolean.TRUE);
  }
}
