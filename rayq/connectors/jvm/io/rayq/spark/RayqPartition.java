package io.rayq.spark;

import java.io.Serializable;
import java.util.List;
import org.apache.spark.sql.connector.read.InputPartition;

/** One Spark task: offset ranges of queues, read in order. */
final class RayqPartition implements InputPartition {
  private static final long serialVersionUID = 1L;

  /** Offsets {@code [start, end)} of one queue, held by the broker actor {@code actor}. */
  static final class Range implements Serializable {
    private static final long serialVersionUID = 1L;
    final String actor;
    final int queueId;
    final long start;
    final long end;

    Range(String actor, int queueId, long start, long end) {
      this.actor = actor;
      this.queueId = queueId;
      this.start = start;
      this.end = end;
    }
  }

  final List<Range> ranges;

  RayqPartition(List<Range> ranges) {
    this.ranges = ranges;
  }
}
