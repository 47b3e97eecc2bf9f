"""The fault-injecting soak (issue 19): see scripts/soak.py and scripts/soaklib/README.md."""
