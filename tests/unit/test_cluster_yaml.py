"""cluster.yaml passes Ray's own cluster-config validation and deploys rayq as README says."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def load() -> dict:
    return yaml.safe_load((ROOT / "cluster.yaml").read_text())


def test_ray_validates_cluster_yaml() -> None:
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = load()
    assert config["provider"]["type"] == "local"
    validate_config(prepare_config(copy.deepcopy(config)))  # what `ray up` runs


def installs(command: str, package: str) -> bool:
    """Whether ``command`` installs the Debian ``package`` whenever the tool it gives is
    missing: its guard (``command -v <tool> || ...``), if any, names that tool."""
    if not re.search(rf"apt-get install -y (\S+ )*{re.escape(package)}\b", command):
        return False
    tool = "javac" if "-jdk" in package else "java"
    guard = re.match(r"\s*command -v (\S+)[^|]*\|\|", command)
    return guard is None or guard.group(1) == tool


def test_every_node_gets_what_rayqs_spark_jar_needs() -> None:
    """Either a JDK (rayq compiles its Spark jar on first use when the package has none),
    or a JRE and a wheel (built where a JDK is, it carries the jar): never a JRE alone
    with a package that may lack the jar. A JRE on the node must not skip the JDK."""
    setup = load()["setup_commands"]
    [pip] = [c for c in setup if "pip install" in c]
    assert "[spark]" in pip
    jdk = any(installs(c, "openjdk-17-jdk-headless") for c in setup)
    jre = any(installs(c, "openjdk-17-jre-headless") for c in setup)
    wheel = re.search(r"""pip install [^#]*\.whl\[spark\]""", pip) is not None
    assert jdk or (jre and wheel), setup


def test_token_auth_on_every_node() -> None:
    config = load()
    starts = config["head_start_ray_commands"] + config["worker_start_ray_commands"]
    assert all("RAY_AUTH_MODE=token" in c for c in starts if "start" in c and "stop" not in c)
    assert "~/.ray/auth_token" in config["file_mounts"]


def test_broker_nodes_are_pinned_by_a_resource_named_in_a_host_local_file() -> None:
    config = load()
    for commands in (config["head_start_ray_commands"], config["worker_start_ray_commands"]):
        start = next(c for c in commands if "ray start" in c)
        assert "/etc/rayq/broker-name" in start and "rayq_broker:" in start
        assert '--resources="$RES"' in start
    head = " ".join(config["head_start_ray_commands"])
    assert "rayq start --placement resource" in head


def test_the_commented_cloud_variant_is_valid_yaml() -> None:
    text = (ROOT / "cluster.yaml").read_text().split("# --- Cloud variant")[1]
    lines = [ln[2:] for ln in text.splitlines()[1:] if ln.startswith("# ")]
    cloud = yaml.safe_load(
        "\n".join(ln for ln in lines if not ln.startswith("each ") and not ln.startswith("and its"))
    )
    types = cloud["available_node_types"]
    assert {"rayq_broker:broker-a", "rayq_broker:broker-b"} <= {
        r for t in types.values() for r in t["resources"]
    }


def test_rayq_start_gets_the_broker_config_file_mounted_on_every_node() -> None:
    """The head's ``rayq start --config`` names a file that file_mounts copies from the
    checkout, and that file is a valid BrokerConfig."""
    import rayq

    config = load()
    start = next(c for c in config["head_start_ray_commands"] if "rayq start" in c)
    target = re.search(r"--config (\S+)", start)
    assert target is not None, start
    source = config["file_mounts"][target.group(1)]
    assert isinstance(rayq.BrokerConfig.from_toml(ROOT / source), rayq.BrokerConfig)
