"""plan/: bound queries → plans. Today: view inlining. The relational IR,
its optimizer and EXPLAIN arrive with the incremental-maintenance issue."""
