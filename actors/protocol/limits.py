"""Limits of the contract that clients check before a request leaves them and the
broker checks again when it arrives."""

from typing import Final

# A message goes to %DLQ%<group> after this many redeliveries (RocketMQ maxReconsumeTimes).
DEFAULT_MAX_RECONSUME_TIMES: Final[int] = 16
# A message with a deliver-at time may be at most this far in the future.
DELIVER_AT_MAX_AHEAD_MS: Final[int] = 3 * 24 * 3600 * 1000
# Timestamps travel as int64 milliseconds since the epoch (``wire.TimestampMs``).
TIMESTAMP_MS_MAX: Final[int] = 2**63 - 1
