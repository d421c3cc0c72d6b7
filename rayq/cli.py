"""The ``rayq`` command: deploy, inspect and stop rayq on a running Ray cluster.

    rayq start  [--address auto] [--namespace rayq] [--brokers 1] [--store-dir DIR]
                [--placement local|resource] [--wait-brokers N] [--wait-timeout S]
                [--slaves N] [--role ASYNC_MASTER|SYNC_MASTER] [--no-failover]
    rayq status [--address auto] [--namespace rayq]
    rayq stop   [--address auto] [--namespace rayq]

``start`` leaves the actors running (they are detached) and exits; drivers and
``ray job submit`` scripts then attach with ``rayq.connect()``.
"""

from __future__ import annotations

import argparse
import logging
import sys

from rayq.actors.config import NAMESPACE


def make_argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rayq", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("start", "start a coordinator and brokers on this node"),
                       ("status", "list brokers and topics"),
                       ("stop", "stop every rayq actor (stores are closed cleanly)")):  # fmt: skip
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("--address", default="auto", help="Ray address (default: auto)")
        cmd.add_argument("--namespace", default=NAMESPACE, help="Ray namespace of rayq")
        if name == "start":
            cmd.add_argument("--brokers", type=int, default=1, help="brokers to start (1..26)")
            cmd.add_argument("--store-dir", default=None, help="directory for the stores")
            cmd.add_argument("--placement", choices=("local", "resource"), default="local",
                             help="local: --brokers on this node; resource: one broker per "
                             "node with a rayq_broker:<name> resource")  # fmt: skip
            cmd.add_argument("--wait-brokers", type=int, default=0,
                             help="with --placement resource: first wait for this many "
                             "broker nodes to join")  # fmt: skip
            cmd.add_argument(
                "--wait-timeout",
                type=float,
                default=300.0,
                help="seconds to wait for --wait-brokers (default 300)",
            )
            cmd.add_argument(
                "--slaves",
                type=int,
                default=0,
                help="with --placement local: slaves per broker (default 0); "
                "with resource: nodes with rayq_broker:<name>#<id> are slaves",
            )
            cmd.add_argument(
                "--role",
                choices=("ASYNC_MASTER", "SYNC_MASTER"),
                default="ASYNC_MASTER",
                help="the masters' replication role",
            )
            cmd.add_argument("--no-failover", action="store_true",
                             help="never promote a slave (it then serves reads only)")  # fmt: skip
    return parser


def main(argv: list[str] | None = None) -> int:
    args = make_argument_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    import ray

    from rayq.actors.config import BrokerConfig, BrokerRole
    from rayq.actors.protocol import ClientRequest, broker_actor_name
    from rayq.client import CALL_TIMEOUT_S
    from rayq.cluster import Cluster, connect, running_actors, start
    from rayq.ray_transport import RayTransport
    from rayq.store.errors import RayqError

    try:
        if args.command == "start":
            if args.wait_brokers:
                _wait_for_broker_nodes(args)
            config = BrokerConfig(broker_role=BrokerRole(args.role),
                                  auto_failover=not args.no_failover)  # fmt: skip
            cluster = start(args.store_dir, args.brokers, namespace=args.namespace,
                            address=args.address, placement=args.placement,
                            slaves=args.slaves, config=config)  # fmt: skip
            print(
                f"rayq running in namespace {args.namespace!r}: brokers {cluster.broker_names} "
                f"(replicas {cluster.replicas}), stores under {cluster.store_dir}"
            )
            return 0
        connect(args.namespace, address=args.address)
        coordinator = RayTransport(args.namespace).coordinator()
        brokers = coordinator.brokers(ClientRequest()).result(CALL_TIMEOUT_S).names
        if args.command == "status":
            print(f"brokers: {brokers}")
            print(f"topics: {coordinator.topics(ClientRequest()).result(CALL_TIMEOUT_S).names}")
            return 0
        prefix = broker_actor_name("")
        replicas = [
            a[len(prefix) :] for a in running_actors(args.namespace) if a.startswith(prefix)
        ]
        slaves = [r for r in replicas if r not in brokers]
        Cluster(args.namespace, brokers, None, owns_ray=False,  # type: ignore[arg-type]
                replicas=[*brokers, *slaves]).shutdown()  # fmt: skip
        print(f"rayq stopped in namespace {args.namespace!r}")
        return 0
    except RayqError as exc:
        print(f"rayq {args.command}: {exc}", file=sys.stderr)
        return 1
    finally:
        if ray.is_initialized():
            ray.shutdown()


def _wait_for_broker_nodes(args: argparse.Namespace) -> None:
    import time

    import ray

    from rayq.cluster import broker_nodes
    from rayq.store.errors import BrokerUnavailableError

    ray.init(address=args.address, namespace=args.namespace, log_to_driver=False)
    deadline = time.monotonic() + args.wait_timeout
    while len(found := broker_nodes()) < args.wait_brokers:
        if time.monotonic() > deadline:
            raise BrokerUnavailableError(
                f"only {len(found)} of {args.wait_brokers} broker nodes joined within "
                f"{args.wait_timeout:.0f} s: {sorted(found)}"
            )
        time.sleep(2)


if __name__ == "__main__":
    sys.exit(main())
