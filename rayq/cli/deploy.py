"""``rayq start`` and ``rayq stop`` (they join Ray: they place or end actors) and
``rayq console`` (the web console, over the deployment's ``rayq://`` URL)."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import time
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from rayq.bootstrap import KEY_FILE, URL_FILE
from rayq.cli.ray_join import join_ray
from rayq.cli.registry import command
from rayq.cli.session import Session
from rayq.store.errors import BrokerUnavailableError, ConfigError

if TYPE_CHECKING:
    from rayq.actors.protocol.config import BrokerConfig


@command("start")
def _start(session: Session, args: argparse.Namespace) -> int:
    config = broker_config(args)  # a bad file fails before Ray is joined
    join_ray(args.address, args.namespace)  # first: Ray reads RAY_AUTH_MODE on import
    from rayq.cluster import start

    if args.wait_brokers:
        _wait_for_broker_nodes(args)
    cluster = start(
        args.store_dir,
        args.brokers,
        namespace=args.namespace,
        placement=args.placement,
        slaves=args.slaves,
        config=config,
    )
    print(
        f"rayq running in namespace {args.namespace!r}: brokers {cluster.broker_names} "
        f"(replicas {cluster.replicas})"
    )
    if cluster.store_dir is not None:
        _print_where(Path(cluster.store_dir))
    return 0


def _print_where(store_dir: Path) -> None:
    """The store and the deployment's rayq:// URL (from the files ``rayq.start`` wrote)."""
    print(f"store: {store_dir}")
    url_file, key_file = store_dir / URL_FILE, store_dir / KEY_FILE
    if url_file.is_file():
        url = url_file.read_text(encoding="utf-8").strip()
        print(f"url: {url} (key in {key_file})")
        print(f"elsewhere: export RAYQ_URL={url} RAYQ_KEY=$(cat {key_file})")


def broker_config(args: argparse.Namespace) -> BrokerConfig:
    """The masters' config: ``--config FILE`` (``BrokerConfig.from_toml``: ConfigError
    naming the key of a bad one) or the defaults, with ``--role``,
    ``--min-in-sync-replicas`` and ``--no-failover`` over it when given."""
    from rayq.actors.protocol.config import BrokerConfig, BrokerRole

    config = BrokerConfig.from_toml(args.config) if args.config else BrokerConfig()
    overrides = {
        "broker_role": BrokerRole(args.role) if args.role else None,
        "auto_failover": False if args.no_failover else None,
        "min_in_sync_replicas": args.min_in_sync_replicas,
    }
    return msgspec.structs.replace(config, **{k: v for k, v in overrides.items() if v is not None})


@command("stop")
def _stop(session: Session, args: argparse.Namespace) -> int:
    join_ray(args.address, args.namespace)  # first: Ray reads RAY_AUTH_MODE on import
    from rayq.actors.protocol import ClientRequest, broker_actor_name
    from rayq.actors.protocol.config import REPLICA_SEPARATOR
    from rayq.cluster import Cluster, running_actors
    from rayq.store.errors import PermissionDeniedError
    from rayq.transport.context import CALL_TIMEOUT_S
    from rayq.transport.ray_actors import RayTransport

    prefix = broker_actor_name("")
    replicas = [a[len(prefix) :] for a in running_actors(args.namespace) if a.startswith(prefix)]
    if not replicas:
        raise BrokerUnavailableError(
            f"no rayq deployment in Ray namespace {args.namespace!r} (nothing to stop): "
            "check --namespace"
        )
    coordinator = RayTransport(args.namespace).coordinator()
    try:
        brokers = coordinator.brokers(ClientRequest()).result(CALL_TIMEOUT_S).names
    except PermissionDeniedError:  # ACL on (no credentials here): the masters' actor names
        brokers = [r for r in replicas if REPLICA_SEPARATOR not in r]
    slaves = [r for r in replicas if r not in brokers]
    Cluster(args.namespace, brokers, None, owns_ray=False, replicas=[*brokers, *slaves]).shutdown()
    print(f"rayq stopped in namespace {args.namespace!r}")
    return 0


def _wait_for_broker_nodes(args: argparse.Namespace) -> None:
    from rayq.cli.output import spinner
    from rayq.cluster import broker_nodes

    deadline = time.monotonic() + args.wait_timeout
    with spinner("waiting for broker nodes"):
        while len(found := broker_nodes()) < args.wait_brokers:
            if time.monotonic() > deadline:
                raise BrokerUnavailableError(
                    f"only {len(found)} of {args.wait_brokers} broker nodes joined within "
                    f"{args.wait_timeout:.0f} s: {sorted(found)}"
                )
            time.sleep(2)


@command("console")
def _console(session: Session, args: argparse.Namespace) -> int:
    """Serve the web console (``rayq.console``, the ``console`` extra) until Ctrl-C."""
    url, key = session.target()
    if url is None:
        raise ConfigError(
            "the console reaches a deployment by its rayq:// URL: pass --url (or set "
            "$RAYQ_URL), or run it where `rayq start` wrote rayq.url"
        )
    try:
        console = importlib.import_module("rayq.console")
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C ends it: exit 0
            console.serve(
                host=args.host, port=args.port, url=url, key=key, credentials=session.credentials
            )
    except ImportError as exc:  # rayq.console, or the web packages it serves with
        raise ConfigError(
            f"the web console needs the console extra ({exc}): pip install 'rayq[console]'"
        ) from None
    return 0
