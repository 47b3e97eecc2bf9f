"""PostgreSQL's array input syntax in a cast: ``'{a,"b c",NULL}'::text[]``.

Clients write arrays this way (pgjdbc's getSQLKeywords compares with
``ALL ('{…}'::text[])``), and neither Spark nor DuckDB reads the text form. At parse time
the literal becomes the ``ARRAY[…]`` of its elements, each cast to the element type,
which every path evaluates. One dimension; a nested or dimension-decorated literal is
refused by name.
"""

from __future__ import annotations

from sqlglot import exp

from mzflow.errors import InvalidTextRepresentation, Unsupported


def elements(text: str) -> list[str | None]:
    """The elements of a one-dimensional array literal (None: an unquoted NULL)."""
    s = text.strip()
    if s.startswith("["):
        raise Unsupported("array literals with explicit bounds are not supported yet")
    if not s.startswith("{"):
        raise _malformed(text, 'Array value must start with "{" or dimension information.')
    out: list[str | None] = []
    i, n = 1, len(s)
    if s[1:].strip() == "}":
        return out
    while True:
        while i < n and s[i].isspace():
            i += 1
        if i >= n:
            raise _malformed(text, "Unexpected end of input.")
        if s[i] == "{":
            raise Unsupported("multidimensional array literals are not supported yet")
        value, quoted, i = _element(s, i, text)
        out.append(None if not quoted and value.upper() == "NULL" else value)
        while i < n and s[i].isspace():
            i += 1
        if i >= n:
            raise _malformed(text, "Unexpected end of input.")
        if s[i] == "}":
            if s[i + 1:].strip():
                raise _malformed(text, "Junk after closing right brace.")
            return out
        if s[i] != ",":
            raise _malformed(text, f'Unexpected "{s[i]}" character.')
        i += 1


def _element(s: str, i: int, text: str) -> tuple[str, bool, int]:
    """One element from ``s[i]``: its text, whether it was quoted, where it ends."""
    chars: list[str] = []
    if s[i] == '"':
        i += 1
        while i < len(s) and s[i] != '"':
            if s[i] == "\\":
                i += 1
            if i < len(s):
                chars.append(s[i])
                i += 1
        if i >= len(s):
            raise _malformed(text, "Unexpected end of input.")
        return "".join(chars), True, i + 1
    while i < len(s) and s[i] not in ',}':
        if s[i] == "{":
            raise _malformed(text, 'Unexpected "{" character.')
        if s[i] == '"':  # a quote inside an unquoted element
            raise _malformed(text, "Unexpected array element.")
        if s[i] == "\\" and i + 1 < len(s):
            i += 1
        chars.append(s[i])
        i += 1
    value = "".join(chars).strip()
    if not value:
        raise _malformed(text, 'Unexpected "' + (s[i] if i < len(s) else "") + '" character.')
    return value, False, i


def _malformed(text: str, detail: str) -> InvalidTextRepresentation:
    return InvalidTextRepresentation(f'malformed array literal: "{text}"', detail=detail)


def expand(tree: exp.Expr) -> exp.Expr:
    """``tree`` with each ``'{…}'::T[]`` written as ``ARRAY[…]::T[]`` (elements cast to T)."""
    for cast in list(tree.find_all(exp.Cast)):
        to, this = cast.to, cast.this
        if not (isinstance(this, exp.Literal) and this.is_string
                and to.is_type(exp.DType.ARRAY) and to.expressions):
            continue
        element = to.expressions[0]
        this.replace(exp.Array(expressions=[
            exp.Cast(this=exp.Null() if v is None else exp.Literal.string(v),
                     to=element.copy()) for v in elements(this.name)]))
    return tree
