"""The Spark job as spark-submit runs it (docs/spark.md):

    spark-submit --master URL jobs/run/spark_job.py INPUT... --out DIR [tailscope analyze options]

The options are `tailscope analyze`'s; the engine is Spark and the master is spark-submit's
(unless --spark-master names another). Exit status as `tailscope analyze`.
"""
from __future__ import annotations

import sys


def run(argv: list[str] | None = None) -> int:
    from tailscope.cli import main

    argv = list(sys.argv[1:] if argv is None else argv)
    return main(["analyze", "--engine", "spark", *argv])


if __name__ == "__main__":
    sys.exit(run())
