"""Where Spark's JVM writers leave a put's rows for the broker on the same node
(``ArrowPutRequest.rows_file``; the broker side is ``rayq.actors.server.shared_rows``)."""

from typing import Final

SHARED_DIR: Final[str] = "/dev/shm"
# ArrowPutRequest.rows_file: empty, or one of the broker's slot names in SHARED_DIR
PATH_PATTERN: Final[str] = r"^(/dev/shm/rayq-put-[0-9a-f]{32})?$"
