"""Audit analytics (`delegate report`): the only part of the toolkit that imports PySpark.

`generator` writes realistic synthetic audit logs (no Spark); `figures` computes the report with
Spark; `compact` turns new NDJSON into day-partitioned Parquet; `render` prints and writes it.
"""
