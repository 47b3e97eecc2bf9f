"""The fault-injecting soak (issue 19): see scripts/soak.py and mzflow_dev/soak/README.md."""
