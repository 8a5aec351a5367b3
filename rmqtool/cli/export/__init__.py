"""``rmqtool export``: stores -> Parquet, as another caller of ``recovery/``.

- :mod:`.rows`: the export's columns (from :mod:`rmqtool.recovery.records`) and the
  records of ``dump`` as row tuples (no pyspark, no pyarrow);
- :mod:`.arrow`: the Arrow schema and one commitlog split as RecordBatches (pyarrow);
- :mod:`.parquet`: the executors' Parquet writer of ``--writer arrow`` (pyarrow);
- :mod:`.executor`: the bodies of the Spark tasks;
- :mod:`.spark`: the driver (the only module that imports pyspark, inside functions).

Nothing in ``recovery/`` or ``formats/`` imports this package; :mod:`rmqtool.cli.export.command`
parses the options and calls :func:`.spark.run_export`.
"""
