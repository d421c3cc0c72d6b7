"""The broker's services without Ray: what the actor shells in ``rayq.actors`` wrap.

Plain Python objects over ``rayq.store``: the broker's logic (``broker_server``), its
config tables (``tables``, files in ``table_files``),
delayed delivery (``schedule``, ``delay_levels``), send-back to retry and dead-letter
topics (``send_back``), idempotent-produce sequences (``dedupe``), columnar reads for
Spark and Ray Data (``columnar``), orderly-consumption queue locks (``queue_locks``),
rebalance and allocation (``rebalance``, ``allocation``) and streaming plans
(``stream_plans``). Each is testable in one process; none imports Ray.
"""
