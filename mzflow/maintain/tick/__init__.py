"""A tick's parts: gathering its inputs (``inputs``), computing its changes
(``execute``) and committing them (``commit``). ``maintain/ticks.py`` runs them in
order; the decision between them is ``incremental/decide.py`` (pure)."""
