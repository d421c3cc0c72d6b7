package io.rayq.spark;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.Map;
import java.util.TreeMap;

/**
 * Where the streaming source and sink find rayq's Python client on the driver: the
 * {@link Planner} that {@code rayq.spark.session} registers. A rayq error it answers is
 * thrown as {@code rayq.errors.<class>: <message>}: an IllegalArgumentException for bad
 * input (the client's errors), an IllegalStateException for the rest.
 */
public final class Planners {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String[] CLIENT_ERRORS = {
    "ClientError", "InvalidTopicError", "InvalidGroupError", "InvalidMessageError",
    "MessageTooLargeError", "InvalidRequestError", "InvalidFilterError", "InvalidOffsetError",
    "DataLossError", "TopicNotFoundError", "GroupNotFoundError", "PermissionDeniedError",
    "ConfigError"
  };
  private static volatile Planner planner;

  private Planners() {}

  /** Called by rayq.spark.session (connectors/spark_bridge.py install). */
  public static void register(Planner p) {
    planner = p;
  }

  /** The answer of {@code method} to the (case-sensitive) options and arguments. */
  static JsonNode call(String method, Map<String, String> options, Map<String, Object> args) {
    Planner p = planner;
    if (p == null) {
      throw new IllegalStateException("rayq.errors.ConfigError: rayq's Spark source and sink "
          + "need a session made by rayq.spark.session() (it connects them to rayq)");
    }
    String reply;
    try {
      reply = p.call(method, JSON.writeValueAsString(new TreeMap<>(options)),
          JSON.writeValueAsString(args));
    } catch (JsonProcessingException e) {
      throw new IllegalStateException("rayq: cannot encode the arguments of " + method, e);
    }
    JsonNode answer;
    try {
      answer = JSON.readTree(reply);
    } catch (JsonProcessingException e) {
      throw new IllegalStateException("rayq: " + method + " answered no JSON: " + reply, e);
    }
    if (answer.has("error")) {
      String cls = answer.get("error").asText();
      String text = "rayq.errors." + cls + ": " + answer.get("message").asText();
      for (String c : CLIENT_ERRORS) {
        if (c.equals(cls)) {
          throw new IllegalArgumentException(text);
        }
      }
      throw new IllegalStateException(text);
    }
    return answer.get("ok");
  }
}
