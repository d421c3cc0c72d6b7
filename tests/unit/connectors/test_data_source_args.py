"""rayq.connectors.ray_data: a bad page size is refused before anything reaches Ray or a broker."""

from __future__ import annotations

import pytest

import rayq.connectors.ray_data
from rayq.store.errors import ConfigError


@pytest.mark.parametrize("page_bytes", [0, -1, (1 << 30) + 1, 1.5, "4MiB", True])
def test_bad_page_bytes_raise_config_error(page_bytes: object) -> None:
    with pytest.raises(ConfigError, match="page_bytes must be an int"):
        rayq.connectors.ray_data.TopicDatasource("orders", page_bytes=page_bytes)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="page_bytes must be an int"):
        rayq.connectors.ray_data.read_topic("orders", page_bytes=page_bytes)  # type: ignore[arg-type]
