"""engine/: bound queries → rows. ``spark/`` runs them on Spark (one ``SparkRuntime`` per
process); ``arrow_expr``/``arrow_query``/``arrow_constants`` and ``local`` evaluate small
ones in process with the same PostgreSQL semantics (``division.py`` holds the numeric
division both engines follow); ``frames`` and ``diffs`` are the Spark side of a tick."""
