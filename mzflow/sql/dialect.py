"""mzflow's SQL dialect: sqlglot's Materialize dialect with our parser
(``sql/parser.py``, DDL in ``sql/parser_ddl.py``) and generator (``sql/generator.py``),
as sqlglot's dialects join its ``parsers/`` and ``generators/``.
"""

from __future__ import annotations

from sqlglot.dialects.materialize import Materialize
from sqlglot.tokens import TokenType

from mzflow.sql.generator import MzGenerator
from mzflow.sql.parser import MzParser


class Mz(Materialize):
    class Tokenizer(Materialize.Tokenizer):
        # RESET and DECLARE are statements of ours, not opaque commands.
        KEYWORDS = {k: v for k, v in Materialize.Tokenizer.KEYWORDS.items()
                    if k not in ("RESET", "EXPLAIN", "DECLARE")}
        # A command token makes the tokenizer swallow the rest of the statement as one
        # string; SHOW and FETCH have a real grammar here.
        COMMANDS = Materialize.Tokenizer.COMMANDS - {TokenType.SHOW, TokenType.FETCH}

    Parser = MzParser
    Generator = MzGenerator
