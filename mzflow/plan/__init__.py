"""plan/: bound queries → plans: views inlined, constants folded, and the relational IR
(``ir.py``) a maintained view is lowered to (``lower.py``). See README.md."""
