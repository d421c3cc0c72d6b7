"""Spark on Ray (RayDP): a topic as a Spark source and sink. Needs the ``spark`` extra.

The public face of ``rayq.connectors.spark`` (see there)::

    from rayq import spark as rqspark
    spark = rqspark.session("etl", num_executors=2, executor_cores=1, executor_memory="1g")
    df = rqspark.read(spark, "orders", starting="earliest", ending="latest")
    query = rqspark.stream(spark, "orders", group="etl", process=fn)  # fn(df, batch_id)
    rqspark.write(df, "results", body_col="body")
"""

from rayq.connectors.spark import (
    JAVA17_OPTIONS,
    read,
    session,
    spark_schema,
    stop_session,
    stream,
    write,
)

__all__ = ["JAVA17_OPTIONS", "read", "session", "spark_schema", "stop_session", "stream", "write"]
