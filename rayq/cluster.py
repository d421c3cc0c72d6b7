"""Starting and attaching to a rayq deployment: ``rayq.start()`` and ``rayq.connect()``.

``start`` is the embedded default: in the current Ray driver (``ray.init`` with
``address="local"`` unless Ray is already initialized) it starts the coordinator
and ``brokers`` brokers, each with its flusher and pull-hold actor, on this node,
with stores under ``store_dir`` (default: ``$RAYQ_HOME``, else ``./rayq-data``, kept
across starts; one line on stderr says where, through the ``rayq.start`` logger).
``connect`` only checks that a deployment is running in the namespace.

On a multi-node cluster, ``start(placement="resource")`` starts one broker on every
node that carries a custom resource ``rayq_broker:<name>`` (set at ``ray start
--resources``), named ``<name>`` and pinned to that node, so its store stays on
that node's disk (``cluster.yaml`` reads the name from a host-local file).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ray

from rayq.actors.broker_spawn import spawn_broker
from rayq.actors.coordinator import spawn_coordinator
from rayq.actors.failover import BROKER_RESOURCE_PREFIX, replica_nodes
from rayq.actors.flusher import spawn_flusher
from rayq.actors.protocol import (
    COORDINATOR_NAME,
    PAGE_READER_ACTOR_PREFIX,
    broker_actor_name,
    flusher_actor_name,
    hold_actor_name,
    replica_actor_names,
)
from rayq.actors.protocol.config import (
    NAMESPACE,
    REPLICA_SEPARATOR,
    BrokerConfig,
    BrokerRole,
    replica_name,
)
from rayq.actors.protocol.server_key import ServerKey, Signed
from rayq.actors.pull_hold import spawn_hold
from rayq.bootstrap import KEY_FILE, URL_FILE, deployment_key, home, remove_url, write_url
from rayq.store.errors import BrokerUnavailableError, ConfigError, RayqError, StoreLockedError
from rayq.store.message_store import ensure_unlocked
from rayq.transport.choice import forget_transports
from rayq.transport.namespace import current_namespace as current_namespace
from rayq.transport.namespace import set_current_namespace

logger = logging.getLogger(__name__)
START_LOGGER = "rayq.start"  # the one line saying where the stores are (``announce``)

START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0


class Cluster:
    """A running deployment started by :func:`start` (``shutdown()`` stops it)."""

    def __init__(
        self,
        namespace: str,
        broker_names: list[str],
        store_dir: Path | None,  # None: a cluster found running (``rayq stop``)
        owns_ray: bool,
        replicas: list[str] | None = None,
        server_key: ServerKey | None = None,
    ) -> None:
        self.namespace = namespace
        # the deployment's server key (None: a cluster found running, as ``rayq stop``
        # finds one): signs the brokers' shutdown; never shown (repr, logs)
        self._server_key = server_key
        self.broker_names = broker_names
        self.replicas = replicas or list(broker_names)  # masters' and slaves' actor names
        self.store_dir = store_dir
        self._owns_ray = owns_ray
        self._closed = False
        # where clients outside Ray connect (rayq.connect(url, key=...)): the bootstrap
        # endpoint; its key is in <store_dir>/rayq.key ("": not known)
        self.url = ""

    def server_actor(self, actor_name: str) -> Any:
        """``server_actor(actor_name, namespace)`` for this deployment."""
        return server_actor(actor_name, self.namespace)

    def shutdown(self) -> None:
        """Stop brokers (closing their stores cleanly), then every rayq actor."""
        if self._closed:
            return
        self._closed = True
        if self._server_key is not None and _KEYS.get(self.namespace) is self._server_key:
            del _KEYS[self.namespace]
        for name in [*self.replicas[len(self.broker_names) :], *self.broker_names]:  # slaves first
            for actor_name in replica_actor_names(name):
                _stop(actor_name, self.namespace, self._server_key)
        _stop(COORDINATOR_NAME, self.namespace, None)
        _wait_gone(self.namespace)
        forget_transports(self.namespace)
        if self.store_dir is not None and self.url:
            with contextlib.suppress(OSError):
                if (self.store_dir / URL_FILE).read_text().strip() == self.url:
                    remove_url(self.store_dir)
        if self._owns_ray:
            ray.shutdown()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


# The server keys of the deployments this driver started, by namespace.
_KEYS: dict[str, ServerKey] = {}


def server_actor(actor_name: str, namespace: str) -> Any:
    """The running server actor ``actor_name`` (a broker, flusher or hold service, the
    coordinator) of the deployment this driver started in ``namespace``, its server
    operations (``broker_info``, ``flush_targets`` ...) signed with that deployment's
    server key: for the operator who started it, and tests. ValueError if it is not
    running; ConfigError if this driver did not start the deployment (only the driver
    that started one holds its key)."""
    key = _KEYS.get(namespace)
    if key is None:
        raise ConfigError(
            f"no deployment started by this driver in namespace {namespace!r}: only the "
            "driver that started a deployment holds its server key",
            namespace=namespace,
        )
    prefixes = {
        broker_actor_name(""): "broker",
        flusher_actor_name(""): "flusher",
        hold_actor_name(""): "hold",
        COORDINATOR_NAME: "coordinator",
    }
    service = next((s for p, s in prefixes.items() if actor_name.startswith(p)), "")
    handle = ray.get_actor(actor_name, namespace=namespace)
    return Signed(handle, key, service, actor_name) if service else handle


def _stop(actor_name: str, namespace: str, server_key: ServerKey | None) -> None:
    """End an actor for good; a broker first closes its store cleanly when we hold the
    deployment's server key (``shutdown`` needs its proof). Without (``rayq stop`` from
    another driver) the broker is killed and recovers its store at its next start."""
    try:
        handle = ray.get_actor(actor_name, namespace=namespace)
    except ValueError:
        return
    if actor_name.startswith("rayq-broker-") and server_key is not None:
        signed = Signed(handle, server_key, "broker", actor_name)
        try:
            ray.get(signed.shutdown.remote(), timeout=30)
        except ray.exceptions.RayActorError:
            pass  # closed its store and exited, as it should
        except Exception:
            logger.warning("broker %s did not shut down cleanly", actor_name)
    ray.kill(handle, no_restart=True)


def _wait_gone(namespace: str, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """Wait until Ray has released every rayq actor name in ``namespace``: ``ray.kill``
    returns before the actor is dead, and a ``start`` right after a ``stop`` must not
    find the old names taken."""
    deadline = time.monotonic() + timeout_s
    while (left := running_actors(namespace)) and time.monotonic() < deadline:
        time.sleep(0.05)
    if left:
        logger.warning("rayq actors still alive %.0f s after stop: %s", timeout_s, left)


def running_actors(namespace: str) -> list[str]:
    """The rayq server actors (coordinator, brokers, flushers, hold services) that run
    in ``namespace``."""
    prefixes = (
        COORDINATOR_NAME,
        broker_actor_name(""),
        flusher_actor_name(""),
        hold_actor_name(""),
        PAGE_READER_ACTOR_PREFIX,
    )
    return sorted(
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == namespace and a["name"].startswith(prefixes)
    )


def default_store_dir() -> Path:
    """Where ``start()`` keeps its stores when given no ``store_dir``: ``$RAYQ_HOME`` if
    set, else ``./rayq-data`` in the working directory (absolute: brokers run elsewhere)."""
    return home().absolute()


def broker_nodes() -> dict[str, str]:
    """Replica name -> node id of every live node with a ``rayq_broker:<replica>``
    resource (``<name>`` for a master, ``<name>#<id>`` for its slave ``id``)."""
    return replica_nodes(ray.nodes(), unique=True)


def _head_node_id() -> str | None:
    """The Ray head node's id (the coordinator lives there, as long as the cluster)."""
    for node in ray.nodes():
        if node.get("Alive") and "node:__internal_head__" in node.get("Resources", {}):
            return node["NodeID"]
    return None


def start(
    store_dir: str | os.PathLike[str] | None = None,
    brokers: int = 1,
    *,
    config: BrokerConfig | str | os.PathLike[str] | None = None,
    namespace: str = NAMESPACE,
    address: str | None = None,
    placement: str = "local",
    slaves: int = 0,
) -> Cluster:
    """Start a coordinator and brokers; returns the Cluster.

    ``store_dir``: where the brokers keep their stores (default: :func:`default_store_dir`).
    ``config``: the masters' ``BrokerConfig``, or the path of a TOML file of its fields
    (``BrokerConfig.from_toml``). ``placement="local"``: ``brokers`` brokers on this
    node, each a master (its role from ``config.broker_role``) and ``slaves`` slaves
    (ids 1..slaves) replicating it. A store that a running deployment holds is a
    StoreLockedError before anything starts.
    ``placement="resource"``: one broker replica per node with a
    ``rayq_broker:<replica>`` resource: ``<name>`` a master, ``<name>#<id>`` its slave
    (``brokers`` and ``slaves`` ignored). Raises ConfigError, and leaves it alone, if a
    deployment already runs in ``namespace`` (attach to it with :func:`connect`).

    The coordinator serves the bootstrap endpoint for clients outside Ray
    (``Cluster.url``, ``rayq://host:port``); its key is kept in ``<store_dir>/rayq.key``
    (made once, mode 0600) and the URL written to ``<store_dir>/rayq.url``
    (rayq/bootstrap.py).
    """
    if placement not in ("local", "resource"):
        raise ConfigError(f"placement must be 'local' or 'resource', got {placement!r}")
    if not isinstance(brokers, int) or isinstance(brokers, bool) or not 1 <= brokers <= 26:
        raise ConfigError(f"brokers must be an int in 1..26, got {brokers!r}")
    if isinstance(config, str | os.PathLike):
        config = BrokerConfig.from_toml(config)
    if config is not None and not isinstance(config, BrokerConfig):
        raise ConfigError(
            "config must be a rayq.BrokerConfig or the path of a TOML file, got "
            f"{type(config).__name__}"
        )
    if not isinstance(slaves, int) or isinstance(slaves, bool) or not 0 <= slaves <= 8:
        raise ConfigError(f"slaves must be an int in 0..8, got {slaves!r}")
    if config is not None and not config.broker_role.is_master:
        raise ConfigError(
            "rayq.start: config is the masters' (ASYNC_MASTER or SYNC_MASTER); "
            "slaves are started with slaves=<n> or a rayq_broker:<name>#<id> "
            "resource"
        )
    owns_ray = not ray.is_initialized()
    if owns_ray:
        with _quiet_ray_start():
            ray.init(
                address=address or "local",
                namespace=namespace,
                log_to_driver=False,
                logging_level=logging.WARNING,
            )
    running = running_actors(namespace)
    if running:
        if owns_ray:
            ray.shutdown()
        raise ConfigError(
            f"a rayq deployment already runs in Ray namespace {namespace!r} (actors "
            f"{', '.join(running)}); use rayq.connect(namespace={namespace!r}) to use it, "
            "start in another namespace, or shut it down first (Cluster.shutdown() or "
            "`rayq stop`)",
            namespace=namespace,
        )
    root = Path(store_dir) if store_dir is not None else default_store_dir()
    base = config or BrokerConfig()
    if placement == "local":
        try:
            _check_stores_free(root, base, brokers, slaves)
        except RayqError:
            if owns_ray:
                ray.shutdown()
            raise
    node_id = ray.get_runtime_context().get_node_id()
    key = ServerKey.new()  # this deployment's: every server actor holds it (server_key.py)
    _KEYS[namespace] = key
    # the key clients outside Ray prove at the bootstrap endpoint (rayq/bootstrap.py)
    access_key = deployment_key(root)
    # the coordinator checks its client operations with the brokers' ACL rules: acl_file,
    # else <store dir>/config/plain_acl.toml (root here; a broker's is under root/<name>)
    coordinator = spawn_coordinator(
        namespace, _head_node_id() or node_id, key, base, str(root), access_key=access_key
    )
    _started(coordinator.ready.remote(), "the coordinator")
    url = _ask(coordinator.bootstrap.remote(), "the bootstrap endpoint")
    write_url(root, url)
    if placement == "resource":
        pinned = broker_nodes()
        if not pinned:
            raise ConfigError(
                f"placement='resource': no live node has a "
                f"'{BROKER_RESOURCE_PREFIX}<name>' resource"
            )
        plan = resource_plan(pinned, base.listen_port)
    else:
        plan = [
            (
                base.broker_name if brokers == 1 else f"{base.broker_name}-{i}",
                broker_id,
                base.listen_port + i,
                node_id,
            )
            for i in range(brokers)
            for broker_id in range(slaves + 1)
        ]
    _warn_few_slaves(base, plan)
    names, replicas = [], []
    for name, broker_id, port, node_id in plan:  # masters first: their slaves find them
        role = base.broker_role if broker_id == 0 else BrokerRole.SLAVE
        cfg = BrokerConfig.from_dict(
            {
                **_asdict(base),
                "broker_name": name,
                "listen_port": port,
                "broker_id": broker_id,
                "broker_role": role.value,
            }
        )
        replica = cfg.replica_name
        store = str(root / replica)
        # Each finds the others by name; the broker last, so it finds its peers at once.
        flusher = spawn_flusher(
            store, cfg.store_config, replica, namespace, node_id, server_key=key
        )
        hold = spawn_hold(cfg, namespace, node_id, server_key=key)
        _started(
            [flusher.ready.remote(), hold.ready.remote()],
            f"the flusher and hold service of {replica}",
        )
        broker = Signed(
            spawn_broker(cfg, store, namespace, node_id, server_key=key),
            key,
            "broker",
            broker_actor_name(replica),
        )
        _started(broker.start_services.remote(), f"broker {replica}")  # registered on return
        replicas.append(replica)
        if broker_id == 0:
            names.append(name)
    set_current_namespace(namespace)
    announce(
        f"rayq started: {len(names)} broker(s) {names}, stores under {root}"
        + (" (store_dir= or $RAYQ_HOME to change)" if store_dir is None else "")
        + f"; clients outside Ray connect to {url} (key in {root / KEY_FILE})"
    )
    cluster = Cluster(
        namespace,
        names,
        root,
        owns_ray,
        [*names, *[r for r in replicas if r not in names]],
        server_key=key,
    )
    cluster.url = url
    return cluster


def _check_stores_free(root: Path, config: BrokerConfig, brokers: int, slaves: int) -> None:
    """StoreLockedError (before any actor starts) if a running deployment holds the store
    of one of the brokers ``start`` would run on this node: its broker would fail to open
    it again and again until the start timed out."""
    root.mkdir(parents=True, exist_ok=True)
    for i in range(brokers):
        name = config.broker_name if brokers == 1 else f"{config.broker_name}-{i}"
        for broker_id in range(slaves + 1):
            store = root / replica_name(name, broker_id)
            if not store.is_dir():
                continue
            try:
                ensure_unlocked(store)
            except StoreLockedError:
                raise StoreLockedError(
                    f"rayq.start: the store {store} is held by a running rayq deployment "
                    "(another namespace or Ray cluster on this machine): shut that one down "
                    "first, attach to it with rayq.connect(), or start with another store_dir "
                    "(or $RAYQ_HOME)",
                    path=str(store),
                ) from None


def announce(line: str) -> None:
    """``line`` at INFO on the ``rayq.start`` logger. When the application configured no
    logging at all, a stderr handler is added to that logger first, so the line shows;
    ``logging.getLogger("rayq.start").setLevel(logging.WARNING)`` silences it."""
    log = logging.getLogger(START_LOGGER)
    if not log.hasHandlers():
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
        log.propagate = False  # a root handler added later would print it twice
        if log.level == logging.NOTSET:
            log.setLevel(logging.INFO)
    log.info("%s", line)


def _warn_few_slaves(config: BrokerConfig, plan: list[tuple[str, int, int, str]]) -> None:
    """Log a SYNC_MASTER that has fewer slaves than ``min_in_sync_replicas``: its sends
    are stored but get SLAVE_NOT_AVAILABLE until enough slaves join."""
    if config.broker_role is not BrokerRole.SYNC_MASTER:
        return
    for name in sorted({p[0] for p in plan}):
        slaves = sum(1 for p in plan if p[0] == name and p[1] > 0)
        if slaves < config.min_in_sync_replicas:
            logger.warning(
                "broker %s: SYNC_MASTER with min_in_sync_replicas=%d but %d slave(s): "
                "every send is stored and answered SLAVE_NOT_AVAILABLE until %d slaves "
                "are in sync",
                name,
                config.min_in_sync_replicas,
                slaves,
                config.min_in_sync_replicas,
            )


def resource_plan(pinned: dict[str, str], port: int) -> list[tuple[str, int, int, str]]:
    """(broker name, broker id, port, node id) for the replicas the nodes' resources name,
    masters first; ConfigError for a slave without its master, or two masters."""
    plan = []
    for replica, node_id in pinned.items():
        name, sep, raw_id = replica.partition(REPLICA_SEPARATOR)
        if sep and not (raw_id.isdigit() and int(raw_id) > 0):
            raise ConfigError(
                f"resource {BROKER_RESOURCE_PREFIX}{replica}: a slave's broker "
                "id must be an int > 0, as in broker-a#1"
            )
        plan.append((name, int(raw_id) if sep else 0, node_id))
    masters = {name for name, broker_id, _ in plan if broker_id == 0}
    orphans = sorted({name for name, broker_id, _ in plan if broker_id and name not in masters})
    if orphans:
        raise ConfigError(
            f"slaves of {orphans} have no master: no live node carries "
            f"{BROKER_RESOURCE_PREFIX}<name> for them"
        )
    ports = {name: port + i for i, name in enumerate(sorted(masters))}
    return [
        (name, broker_id, ports[name], node_id)
        for name, broker_id, node_id in sorted(plan, key=lambda p: (p[1], p[0]))
    ]


def _ask(ref: Any, what: str) -> Any:
    """``ref``'s value, within START_TIMEOUT_S (``_started``)."""
    try:
        return ray.get(ref, timeout=START_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError:
        raise BrokerUnavailableError(
            f"rayq.start: {what} did not answer within {START_TIMEOUT_S:.0f} s"
        ) from None


def _started(refs: Any, what: str) -> None:
    """Wait for server actors to answer, at most START_TIMEOUT_S (an actor that cannot be
    placed or whose process cannot start would otherwise hang ``start`` forever)."""
    try:
        ray.get(refs, timeout=START_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError:
        raise BrokerUnavailableError(
            f"rayq.start: {what} did not start within {START_TIMEOUT_S:.0f} s; see the Ray "
            "logs (ray status, the dashboard) for why its actor could not run"
        ) from None


def connect_ray(namespace: str = NAMESPACE, *, address: str | None = None) -> None:
    """Attach this Ray driver to a running rayq deployment in ``namespace``
    (``rayq.connect`` with a namespace: rayq/bootstrap.py)."""
    if not ray.is_initialized():
        ray.init(address=address or "auto", namespace=namespace, log_to_driver=False)
    try:
        ray.get_actor(COORDINATOR_NAME, namespace=namespace)
    except ValueError:
        raise BrokerUnavailableError(
            f"no rayq deployment in Ray namespace {namespace!r}: start one with rayq.start() "
            "or check the namespace"
        ) from None
    set_current_namespace(namespace)


class _DropNotices(logging.Filter):
    """Ray's notices a new user cannot act on, when rayq starts Ray for them: that token
    authentication is on (the safe default of a local instance). Real warnings pass."""

    NOTICES = ("Token authentication is enabled",)

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(record.getMessage().startswith(n) for n in self.NOTICES)


@contextlib.contextmanager
def _quiet_ray_start() -> Iterator[None]:
    """While rayq starts a local Ray: drop ``_DropNotices`` from Ray's token-auth logger."""
    target = logging.getLogger("ray._private.authentication.authentication_token_setup")
    notices = _DropNotices()
    target.addFilter(notices)
    try:
        yield
    finally:
        target.removeFilter(notices)


def _asdict(cfg: BrokerConfig) -> dict[str, Any]:
    import msgspec

    return msgspec.to_builtins(cfg)


connect = connect_ray  # the name rayq.cluster had before rayq.connect took URLs too

__all__ = ["Cluster", "connect", "connect_ray", "start"]
