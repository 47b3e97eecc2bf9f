"""incremental/: the change plan of each maintained object (what a tick computes, and how)."""
