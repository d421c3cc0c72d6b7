"""The columns of a read page: the Arrow schema every page of ``read_arrow`` has
(built by ``rayq.actors.server.columnar``), and the IPC stream codec for pages and puts."""

from typing import Final

import pyarrow as pa

SCHEMA: Final = pa.schema(
    [
        ("topic", pa.string()),
        ("broker", pa.string()),
        ("queue_id", pa.int32()),
        ("queue_offset", pa.int64()),
        ("msg_id", pa.string()),
        ("tags", pa.string()),
        ("keys", pa.list_(pa.string())),
        ("body", pa.binary()),
        ("properties", pa.map_(pa.string(), pa.string())),
        ("born_timestamp", pa.timestamp("us", tz="UTC")),
        ("store_timestamp", pa.timestamp("us", tz="UTC")),
        ("reconsume_times", pa.int32()),
    ]
)


def from_ipc(data: bytes) -> list[pa.RecordBatch]:
    with pa.ipc.open_stream(pa.py_buffer(data)) as reader:
        return list(reader)
