"""Ray Data without Spark: a topic as a Dataset source and sink.

The public face of ``rayq.connectors.ray_data`` (see there)::

    import rayq.data
    ds = rayq.data.read_topic("orders", starting="earliest", ending="latest")
    ds.write_datasink(rayq.data.TopicDatasink("results", body_col="body"))
"""

from rayq.connectors.ray_data import TopicDatasink, TopicDatasource, read_topic

__all__ = ["TopicDatasink", "TopicDatasource", "read_topic"]
