package io.rayq.spark;

import io.ray.api.PyActorHandle;
import io.ray.api.Ray;
import java.util.Optional;

/** Broker actors and their page readers by name, as the source and the sink reach them. */
final class Brokers {
  private Brokers() {}

  /** The actor {@code actor} of {@code namespace}; a rayq error when it is not running. */
  static PyActorHandle find(String actor, String namespace) {
    Optional<PyActorHandle> found = Ray.getActor(actor, namespace);
    if (!found.isPresent()) {
      throw new IllegalStateException("rayq.errors.BrokerUnavailableError: actor "
          + actor + " is not running in namespace " + namespace);
    }
    return found.get();
  }
}
