"""rayq for data frameworks: Spark on Ray (``spark``, the JVM source and sink in ``jvm/``
compiled by ``spark_jar``), Ray Data (``ray_data``), Arrow pages and puts
(``arrow_io``), offset ranges (``ranges``) and streaming micro-batches (``streaming``).
The public modules are ``rayq.spark`` and ``rayq.data``."""
