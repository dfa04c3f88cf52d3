"""The report's table of locks and claims, from the coordination log (coord.db's events)."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

COORD_SCHEMA = "ts_ms LONG, kind STRING, actor STRING, subject STRING, data STRING"


def resource_frame(spark: SparkSession, events: list[tuple[Any, ...]]) -> DataFrame:
    """Per lock or claim: grants, how long holders waited for them and held them, breaks.

    From coord.db's event log (ts_ms, kind, actor, subject, data): waits from each grant's
    `waited_ms`; holds from releases, breaks, and grants that took over an expired lease.
    """
    frame = spark.createDataFrame(events, COORD_SCHEMA)
    parsed = frame.select(
        F.split("kind", "_").getItem(0).alias("type"),
        F.split("kind", "_").getItem(1).alias("step"),
        F.col("subject").alias("resource"),
        F.get_json_object("data", "$.waited_ms").cast("double").alias("waited_ms"),
        F.coalesce(
            F.get_json_object("data", "$.held_ms"),
            F.get_json_object("data", "$.previous.held_ms"),
        )
        .cast("double")
        .alias("held_ms"),
    ).filter(F.col("type").isin("lock", "claim"))
    return (
        parsed.groupBy("type", "resource")
        .agg(
            F.sum((F.col("step") == "acquired").cast("int")).alias("grants"),
            F.sum((F.col("step") == "broken").cast("int")).alias("broken"),
            (F.avg(F.when(F.col("step") == "acquired", F.col("waited_ms"))) / 1000).alias(
                "avg_wait_s"
            ),
            (F.max(F.when(F.col("step") == "acquired", F.col("waited_ms"))) / 1000).alias(
                "max_wait_s"
            ),
            F.count("held_ms").alias("holds"),
            (F.avg("held_ms") / 1000).alias("avg_hold_s"),
            (F.max("held_ms") / 1000).alias("max_hold_s"),
        )
        .orderBy("type", "resource")
    )
