"""Audit analytics (`delegate report`): the only part of the toolkit that imports PySpark.

`generator` writes realistic synthetic audit logs (no Spark); `figures` computes the report with
Spark; `compact` turns new NDJSON into day-partitioned Parquet. Showing it: `text` prints it in
the terminal, `page` (with `charts` and `page.css`) is the HTML page, `output` writes JSON, the
page or Parquet into a folder, and `common` holds what they share.
"""
