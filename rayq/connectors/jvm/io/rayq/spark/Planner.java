package io.rayq.spark;

/**
 * rayq's Python client as the driver's JVM reaches it (connectors/spark_bridge.py: a py4j
 * callback object registered by {@code rayq.spark.session}). {@code options} and
 * {@code args} are JSON objects; the answer is {@code {"ok": result}} or
 * {@code {"error": class, "message": text}}.
 */
public interface Planner {
  String call(String method, String options, String args);
}
