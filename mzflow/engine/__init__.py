"""engine/: plans → execution. ``local`` runs catalog queries in-process; the
Spark renderer arrives with the Delta tables issue."""
