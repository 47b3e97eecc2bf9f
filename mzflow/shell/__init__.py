"""``mzflow sql``'s interactive shell: meta-commands, completion, history, status line.

``repl`` runs the loop; the other modules are its parts (statement splitting,
``\\d`` output, ``\\h`` grammar, readline, the status line, result tables).
"""
