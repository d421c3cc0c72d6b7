package io.rayq.spark;

import org.apache.spark.sql.connector.read.streaming.Offset;

/**
 * A stream's position: the next offset of every queue it reads, as JSON per topic,
 * broker and queue ({@code {"orders": {"broker-a": {"0": 12}}}}), sorted, so equal
 * positions are equal text (Offset compares {@link #json}).
 */
final class RayqOffset extends Offset {
  private final String json;

  RayqOffset(String json) {
    this.json = json;
  }

  @Override
  public String json() {
    return json;
  }
}
