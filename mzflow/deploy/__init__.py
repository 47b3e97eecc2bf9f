"""Safe changes to a live catalog: plan before apply (issue 38)."""
