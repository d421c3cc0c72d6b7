package io.rayq.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.connector.read.InputPartition;

/** One Spark task: offset ranges of queues, read in order. */
final class RayqPartition implements InputPartition {
  private static final long serialVersionUID = 1L;

  /**
   * Offsets {@code [start, end)} of one queue of {@code topic}, read from the actor
   * {@code actor}; {@code grant}: a signed ReadGrant as JSON (ACL), or "".
   */
  static final class Range implements Serializable {
    private static final long serialVersionUID = 1L;
    final String actor;
    final String topic;
    final int queueId;
    final long start;
    final long end;
    final String grant;

    Range(String actor, String topic, int queueId, long start, long end, String grant) {
      this.actor = actor;
      this.topic = topic;
      this.queueId = queueId;
      this.start = start;
      this.end = end;
      this.grant = grant;
    }
  }

  final List<Range> ranges;

  RayqPartition(List<Range> ranges) {
    this.ranges = ranges;
  }

  /**
   * The tasks of a plan: one JSON list per task of its ranges, each {@code [actor, queue
   * id, start, end]} (a batch read of {@code topic}) or {@code [actor, topic, queue id,
   * start, end, grant]} (a stream's batch).
   */
  static InputPartition[] parse(JsonNode tasks, String topic) {
    InputPartition[] parts = new InputPartition[tasks.size()];
    for (int i = 0; i < parts.length; i++) {
      List<Range> ranges = new ArrayList<>();
      for (JsonNode r : tasks.get(i)) {
        if (r.size() == 4) {
          ranges.add(new Range(r.get(0).asText(), topic, r.get(1).asInt(), r.get(2).asLong(),
              r.get(3).asLong(), ""));
        } else {
          ranges.add(new Range(r.get(0).asText(), r.get(1).asText(), r.get(2).asInt(),
              r.get(3).asLong(), r.get(4).asLong(), r.get(5).asText()));
        }
      }
      parts[i] = new RayqPartition(ranges);
    }
    return parts;
  }
}
