"""Sources: tables fed by their cluster (load generators, as in Materialize)."""
