"""sql/: text → typed statement trees. Imports nothing else from mzflow but errors."""
