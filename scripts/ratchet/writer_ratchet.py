#!/usr/bin/env python3
"""Writer ratchet: count the sites that write onto a ``ServerArgs``.

In sglang 0.5.16 one ``ServerArgs`` instance is the scheduler's, the target
worker's and the process-wide published config at once, so every write onto
it is a potential leak (the speculative draft workers leaked their values to
the target that way). This ratchet keeps the number of writer sites from
growing and locks in every reduction.

What is counted (syntax, not text: Python's ``ast``; comments, docstrings
and string literals never count):

  override  ``R.override(...)`` where R is a ServerArgs receiver, or the bare
            names ``args`` / ``sa`` (on those names ``.override(`` is the
            ServerArgs API; upstream's rule counted them too).
  assign    ``R.field = ...``, ``R.field += ...``, ``R.field: T = ...`` and
            ``del R.field`` (each attribute target is one site; a write to a
            sub-object, ``R.field.x = ...`` or ``R.field[i] = ...``, is not).
  setattr   ``setattr(R, ...)``, ``object.__setattr__(R, ...)``,
            ``R.__setattr__(...)``.
  declare   ``declare_load_time_override(...)``: writes through to the
            published ServerArgs (``get_server_args()``).

A ServerArgs receiver R is:
  * a name ``server_args`` or ``*_server_args`` (``draft_server_args``,
    ``dp_server_args``, ...): sglang's naming convention. A draft worker's
    *copy* is still a ServerArgs, so writes on it count;
  * an attribute with such a name (``self.server_args``,
    ``self.scheduler.server_args``, ``get_context().server_args``);
  * a call that returns one: ``get_server_args()``,
    ``get_global_server_args()``, any function named ``*server_args`` or
    ``*server_args_copy`` (not ``set_*``/``override_*``), ``ServerArgs(...)``,
    ``ServerArgs.<classmethod>(...)``, and ``copy.deepcopy`` / ``copy.copy``
    / ``dataclasses.replace`` of a receiver;
  * any other local name its function binds to a receiver: a parameter
    annotated ``ServerArgs`` (``args: "ServerArgs"``), ``sa =
    self.server_args``, ``args = copy.deepcopy(server_args)``, ``for sa in
    (a_server_args, b_server_args)`` or over a call named ``*server_args``.
    Bindings are per function (a nested function sees its enclosing
    function's); module-level code only has the named receivers. ``args``
    alone is usually an argparse.Namespace, so a bare ``args.port = ...``
    counts only when the function binds ``args`` to a ServerArgs. ``self``
    is never a receiver: inside ``ServerArgs`` its own methods resolve the
    object under construction.

Not scanned: ``srt/arg_groups/`` (the resolution pipeline: hooks that run
inside ``ServerArgs.__post_init__`` and the ``_apply_fields`` /
``materialize_declarations`` machinery every ``override`` goes through) and
``multimodal_gen/`` (its own, unrelated ``ServerArgs`` class).
``srt/server_args.py`` is scanned: the class's own ``self`` writes are not
receivers (see above), but a helper there that writes another instance (e.g.
a draft copy) counts.

Each site is keyed by file (relative to the package root), enclosing function
(``Class.method``) and the write itself (receiver, source, field names; not
the values), so a moved line or an edited value is not a new site.

The check compares with the baseline (scripts/ratchet/baseline.json):
  exit 0  the count equals the baseline (when the sites differ, say a write
          moved to another function, they are listed; --strict fails then);
  exit 1  the count grew: each new site is listed as ``file:line: code``;
          or it shrank: lower the baseline with ``--update``, so the
          progress is locked in;
  exit 2  bad input (missing or empty root, unparsable file, bad baseline).

Fast path: files are read as bytes; a text pre-filter finds the few places
that can hold a write, and only the enclosing top-level function or class
member is parsed (a string scan makes sure the cut is not inside a
triple-quoted string; anything unusual falls back to parsing the whole
file). So a file is parsed only where its text could hold a write, and a
syntax error elsewhere is not this tool's to report. ``--no-prefilter``
parses every file in full and must give the same sites.
"""

import argparse
import ast
import bisect
import importlib.util
import json
import os
import re
import shlex
import sys
import warnings
from collections import Counter
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

RULES_VERSION = 1
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_BASELINE = os.path.join(HERE, "baseline.json")

# Directories (relative to the package root) that are not scanned.
EXCLUDED_DIRS = ("srt/arg_groups", "multimodal_gen")

# Upstream's plain-text rule, reproduced for comparison (--upstream-regex-count).
UPSTREAM_REGEX = re.compile(
    rb"server_args\.override\(|\bargs\.override\(|\bsa\.override\("
)
UPSTREAM_EXCLUDED_FILES = ("srt/server_args.py",)
UPSTREAM_EXCLUDED_DIRS = ("srt/arg_groups", "multimodal_gen")

SHORT_OVERRIDE_NAMES = frozenset({"args", "sa"})
DECLARE_FUNC = "declare_load_time_override"
COPY_FUNCS = frozenset({"deepcopy", "copy", "replace"})
COPY_MODULES = frozenset({"copy", "dataclasses"})

EXIT_OK, EXIT_RATCHET, EXIT_BAD_INPUT = 0, 1, 2


class BadInput(Exception):
    """Input the ratchet cannot work with; the message is one line."""


@dataclass(frozen=True)
class Site:
    file: str  # relative to the package root, "/"-separated
    function: str  # "Class.method", "func.inner" or "<module>"
    kind: str  # override | assign | setattr | declare
    write: str  # normalized write, values elided: the stable part of the key
    line: int  # informational only, never part of the key
    code: str  # the source, on one line

    @property
    def key(self) -> Tuple[str, str, str]:
        return (self.file, self.function, self.write)


# ---------------------------------------------------------------------------
# Syntax: what is a receiver, what is a write
# ---------------------------------------------------------------------------


def _is_strong_name(name: str) -> bool:
    return name == "server_args" or name.endswith("_server_args")


def _is_server_args_func(name: str) -> bool:
    if name == "ServerArgs":
        return True
    if name.startswith(("set_", "_set_", "override_")):
        return False
    return name.endswith("server_args") or name.endswith("server_args_copy")


def _func_name(func: ast.expr) -> Optional[str]:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def is_server_args(node: ast.expr, aliases: Set[str]) -> bool:
    """Whether ``node`` denotes a ServerArgs (see the module docstring)."""
    if isinstance(node, ast.Name):
        return _is_strong_name(node.id) or node.id in aliases
    if isinstance(node, ast.Attribute):
        return _is_strong_name(node.attr)
    if isinstance(node, ast.Call):
        func = node.func
        name = _func_name(func)
        if name is None:
            return False
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "ServerArgs"
        ):
            return True  # ServerArgs.from_cli_args(...)
        if _is_server_args_func(name):
            return True
        if name in COPY_FUNCS and node.args:
            if isinstance(func, ast.Attribute) and not (
                isinstance(func.value, ast.Name) and func.value.id in COPY_MODULES
            ):
                return False
            return is_server_args(node.args[0], aliases)
        return False
    if isinstance(node, ast.BoolOp):
        return any(is_server_args(v, aliases) for v in node.values)
    if isinstance(node, ast.IfExp):
        return is_server_args(node.body, aliases) or is_server_args(
            node.orelse, aliases
        )
    if isinstance(node, ast.NamedExpr):
        return is_server_args(node.value, aliases)
    return False


def _mentions_server_args_type(annotation: Optional[ast.expr]) -> bool:
    if annotation is None:
        return False
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name) and node.id == "ServerArgs":
            return True
        if isinstance(node, ast.Attribute) and node.attr == "ServerArgs":
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if re.search(r"\bServerArgs\b", node.value):
                return True
    return False


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _own_nodes(body: Iterable[ast.AST]) -> List[ast.AST]:
    """Nodes of a scope, not descending into nested functions or classes
    (those are returned themselves, but not their insides)."""
    out: List[ast.AST] = []
    stack = list(body)[::-1]
    while stack:
        node = stack.pop()
        out.append(node)
        if isinstance(node, _SCOPES):
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))
    return out


def _header_exprs(node: ast.AST) -> List[ast.expr]:
    exprs = list(node.decorator_list)
    if isinstance(node, ast.ClassDef):
        exprs += node.bases + [kw.value for kw in node.keywords]
    else:
        exprs += node.args.defaults + [d for d in node.args.kw_defaults if d]
    return exprs


def _function_aliases(fn: ast.AST, nodes: List[ast.AST], outer: Set[str]) -> Set[str]:
    args = fn.args
    params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    if args.vararg:
        params.append(args.vararg)
    if args.kwarg:
        params.append(args.kwarg)
    aliases = set(outer) - {p.arg for p in params}
    aliases |= {p.arg for p in params if _mentions_server_args_type(p.annotation)}
    # (names, values, typed): bound to a ServerArgs when typed, or when every
    # value is one (a for loop over a tuple binds each element in turn)
    bindings = []
    for node in nodes:
        if isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            if names:
                bindings.append((names, [node.value], False))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            typed = _mentions_server_args_type(node.annotation)
            values = [node.value] if node.value is not None else []
            bindings.append(([node.target.id], values, typed))
        elif isinstance(node, ast.NamedExpr):
            bindings.append(([node.target.id], [node.value], False))
        elif isinstance(node, (ast.For, ast.AsyncFor)) and isinstance(
            node.target, ast.Name
        ):
            it = node.iter
            if isinstance(it, (ast.Tuple, ast.List)) and it.elts:
                bindings.append(([node.target.id], list(it.elts), False))
            elif isinstance(it, ast.Call):
                name = _func_name(it.func)
                if name and _is_server_args_func(name):
                    bindings.append(([node.target.id], [it], False))
    changed = True
    while changed:
        changed = False
        for names, values, typed in bindings:
            if typed or (values and all(is_server_args(v, aliases) for v in values)):
                for name in names:
                    if name not in aliases:
                        aliases.add(name)
                        changed = True
    return aliases


def _unparse(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # pragma: no cover - defensive
        return "..."


def _const_or_ellipsis(node: Optional[ast.expr]) -> str:
    if isinstance(node, ast.Constant):
        return repr(node.value)
    if isinstance(node, ast.Name):
        return node.id
    return "..."


def _call_shape(call: ast.Call, head: str, first_is_source: bool = True) -> str:
    """``head(<source>, kw1=..., kw2=..., **name)``: the write without values."""
    parts = []
    rest = list(call.args)
    source = None
    if first_is_source:
        if rest:
            source = rest.pop(0)
        else:
            for kw in call.keywords:
                if kw.arg == "source":
                    source = kw.value
        parts.append(_const_or_ellipsis(source) if source is not None else "...")
    parts.extend("..." for _ in rest)
    names = sorted(
        kw.arg for kw in call.keywords if kw.arg is not None and kw.arg != "source"
    )
    parts.extend(f"{name}=..." for name in names)
    for kw in call.keywords:
        if kw.arg is None:
            parts.append(
                f"**{kw.value.id}" if isinstance(kw.value, ast.Name) else "**..."
            )
    return f"{head}({', '.join(parts)})"


class _Collector:
    """Walks a (possibly sliced) module and records writer sites."""

    def __init__(self, rel: str, source: bytes, line_offset: int):
        self.rel = rel
        self.lines = source.split(b"\n")
        self.line_offset = line_offset
        self.sites: List[Site] = []

    # -- scopes ---------------------------------------------------------
    def module(self, body: Sequence[ast.stmt], qual: Tuple[str, ...] = ()) -> None:
        """Statements at module level (or, for a sliced class member, in the
        body of class ``qual``): only named receivers, no bindings."""
        self._block(_own_nodes(body), qual, set())

    def _block(self, nodes: List[ast.AST], qual: Tuple[str, ...], aliases) -> None:
        for node in nodes:
            if isinstance(node, _SCOPES):
                # decorators, defaults and bases run in the enclosing scope
                self._scan(_own_nodes(_header_exprs(node)), qual, aliases)
                inner = qual + (node.name,)
                body = _own_nodes(node.body)
                if isinstance(node, ast.ClassDef):
                    self._block(body, inner, aliases)
                else:
                    self._block(body, inner, _function_aliases(node, body, aliases))
        self._scan(nodes, qual, aliases)

    # -- sites ----------------------------------------------------------
    def _scan(self, nodes: Iterable[ast.AST], qual, aliases: Set[str]) -> None:
        function = ".".join(qual) or "<module>"
        for node in nodes:
            t = type(node)
            if t is ast.Call:
                self._call(node, function, aliases)
            elif t is ast.Assign:
                for target in node.targets:
                    self._targets(node, target, "=", function, aliases)
            elif t is ast.AugAssign:
                op = _AUG_OPS.get(type(node.op), "?") + "="
                self._targets(node, node.target, op, function, aliases)
            elif t is ast.AnnAssign and node.value is not None:
                self._targets(node, node.target, "=", function, aliases)
            elif t is ast.Delete:
                for target in node.targets:
                    self._targets(node, target, "del", function, aliases)

    def _targets(self, stmt, target, op, function, aliases) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self._targets(stmt, elt, op, function, aliases)
        elif isinstance(target, ast.Starred):
            self._targets(stmt, target.value, op, function, aliases)
        elif isinstance(target, ast.Attribute) and is_server_args(
            target.value, aliases
        ):
            field = f"{_unparse(target.value)}.{target.attr}"
            write = f"del {field}" if op == "del" else f"{field} {op}"
            self._add(stmt, function, "assign", write)

    def _call(self, call: ast.Call, function: str, aliases: Set[str]) -> None:
        func = call.func
        if isinstance(func, ast.Attribute):
            recv = func.value
            if func.attr == "override":
                if is_server_args(recv, aliases) or (
                    isinstance(recv, ast.Name) and recv.id in SHORT_OVERRIDE_NAMES
                ):
                    head = f"{_unparse(recv)}.override"
                    self._add(call, function, "override", _call_shape(call, head))
                return
            if func.attr == "__setattr__":
                if (
                    isinstance(recv, ast.Name)
                    and recv.id == "object"
                    and call.args
                    and is_server_args(call.args[0], aliases)
                ):
                    name = call.args[1] if len(call.args) > 1 else None
                    write = (
                        f"object.__setattr__({_unparse(call.args[0])}, "
                        f"{_const_or_ellipsis(name)})"
                    )
                    self._add(call, function, "setattr", write)
                elif is_server_args(recv, aliases):
                    name = call.args[0] if call.args else None
                    write = f"{_unparse(recv)}.__setattr__({_const_or_ellipsis(name)})"
                    self._add(call, function, "setattr", write)
                return
            if func.attr == DECLARE_FUNC:
                self._declare(call, function)
            return
        if isinstance(func, ast.Name):
            if func.id == "setattr" and call.args:
                if is_server_args(call.args[0], aliases):
                    name = call.args[1] if len(call.args) > 1 else None
                    write = (
                        f"setattr({_unparse(call.args[0])}, "
                        f"{_const_or_ellipsis(name)})"
                    )
                    self._add(call, function, "setattr", write)
            elif func.id == DECLARE_FUNC:
                self._declare(call, function)

    def _declare(self, call: ast.Call, function: str) -> None:
        source = call.args[0] if call.args else None
        for kw in call.keywords:
            if kw.arg == "source":
                source = kw.value
        declared = call.args[1] if len(call.args) > 1 else None
        for kw in call.keywords:
            if kw.arg == "declared":
                declared = kw.value
        if isinstance(declared, ast.Dict) and all(
            isinstance(k, ast.Constant) for k in declared.keys
        ):
            fields = "{" + ", ".join(sorted(repr(k.value) for k in declared.keys)) + "}"
        else:
            fields = "..."
        write = f"{DECLARE_FUNC}({_const_or_ellipsis(source)}, {fields})"
        self._add(call, function, "declare", write)

    def _add(self, node: ast.AST, function: str, kind: str, write: str) -> None:
        self.sites.append(
            Site(
                file=self.rel,
                function=function,
                kind=kind,
                write=write,
                line=node.lineno + self.line_offset,
                code=self._code(node),
            )
        )

    def _code(self, node: ast.AST) -> str:
        first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        if first == last:
            text = self.lines[first][node.col_offset : node.end_col_offset]
        else:
            chunk = [self.lines[first][node.col_offset :]]
            chunk += self.lines[first + 1 : last]
            chunk.append(self.lines[last][: node.end_col_offset])
            text = b"\n".join(chunk)
        code = " ".join(text.decode("utf-8", "replace").split())
        code = re.sub(r"([(\[{]) ", r"\1", code)
        code = re.sub(r",? ([)\]}])", r"\1", code)
        return code if len(code) <= 160 else code[:157] + "..."


_AUG_OPS = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.MatMult: "@",
    ast.Div: "/",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.BitAnd: "&",
    ast.FloorDiv: "//",
}


# ---------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------


def _parse(source: bytes, display_path: str, line_offset: int = 0) -> ast.Module:
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None) or 0
        msg = getattr(exc, "msg", None) or str(exc)
        raise BadInput(
            f"{display_path}:{line + line_offset if line else '?'}: cannot parse "
            f"({msg}); fix the file, or exclude it from --root"
        ) from None


def sites_of_file(rel: str, data: bytes, display_path: str) -> List[Site]:
    """Every writer site of one file, by parsing it in full."""
    tree = _parse(data, display_path)
    collector = _Collector(rel, data, 0)
    collector.module(tree.body)
    return collector.sites


# ---------------------------------------------------------------------------
# Fast path: text pre-filter and slicing
# ---------------------------------------------------------------------------

# Every pattern below starts with a literal (or runs on one short line), so
# the regex engine skips ahead with a fast substring search.
_W = rb"[\s\\]*"  # whitespace, newlines, backslash continuations
_OP = rb"(?:[-+*/%@&|^]|//|\*\*|<<|>>)?=(?!=)"
_OVERRIDE_RX = re.compile(rb"override" + _W + rb"\(")
_DECLARE_RX = re.compile(rb"declare_load_time_override" + _W + rb"\(")
_SETATTR_RX = re.compile(rb"setattr(?:__)?" + _W + rb"\(")
# R.field = / R.field += on a receiver whose text ends in server_args(_copy),
# optionally called: ``get_server_args().x = ...``
_STRONG_WRITE_RX = re.compile(
    rb"server_args(?:_copy)?(?:[\s\\]*\([\s\\]*\))?[\s\\]*\.[\s\\]*\w+[\s\\]*" + _OP
)
# ``) = ...``: the closing line of a multi-line target list
_CLOSE_ASSIGN_RX = re.compile(rb"[ \t]*[)\]][ \t]*=(?!=)")
# per line (run with .match/.search on one line only)
# black spaces ``=`` in assignments, not in keyword arguments
_LINE_BIND_RX = re.compile(
    rb"[ \t]*((?:[A-Za-z_][\w.]*(?:[ \t]*:[^=\n]*)?[ \t]+=(?!=)[ \t]*)+)"
)
# after a receiver's text: an access on it (``server_args.x``, ``...()[0]``)
# makes the expression something else, so it binds no alias
_ACCESS_AFTER_RX = re.compile(rb"(?:[ \t]*\([ \t]*\))?[ \t]*[.\[]")
_BIND_TARGET_RX = re.compile(rb"(?:^|=)[ \t]*([A-Za-z_]\w*)[ \t]*(?=[:=])")
_LINE_FOR_RX = re.compile(rb"[ \t]*(?:async[ \t]+)?for[ \t]+([A-Za-z_]\w*)[ \t]+in\b")
_WALRUS_RX = re.compile(rb"([A-Za-z_]\w*)[ \t]*:=")
_ANN_NAME_RX = re.compile(rb"([A-Za-z_]\w*)[ \t]*:(?!=)")
_LINE_DEL_RX = re.compile(rb"[ \t]*del\b")
_CALL_RECV_WRITE_RX = re.compile(rb"\)" + _W + rb"\." + _W + rb"\w+" + _W + _OP)
_ELEMENT_HEAD_RX = re.compile(rb"[ \t]*[\w.]*")
_TUPLE_HEAD_RX = re.compile(rb"[ \t]*[(\[]?[^\n=(#]*$")
_LONE_EQ_RX = re.compile(rb"(?<![=!<>:])=(?!=)")
_ATTR_TAIL_RX = re.compile(
    _W + rb"\." + _W + rb"\w+" + _W + rb"(?:(" + _OP + rb")|[,)\]])"
)
_CONT_ENDS = (b"(", b"[", b"{", b",", b"\\")

# Strings and comments, to know which line starts are inside a triple-quoted
# string (the scan agrees with the tokenizer on every file of 0.5.16).
_STR_SCAN = re.compile(
    rb'#[^\n]*|("""[^"\\]*(?:(?:\\.|"(?!""))[^"\\]*)*"""'
    rb"|'''[^'\\]*(?:(?:\\.|'(?!''))[^'\\]*)*''')"
    rb'|"[^"\\\n]*(?:\\.[^"\\\n]*)*"'
    rb"|'[^'\\\n]*(?:\\.[^'\\\n]*)*'",
    re.S,
)
_HEADER_RX = re.compile(rb"(?:async[ \t]+)?(def|class)\b|@")


def _line_at(data: bytes, pos: int) -> Tuple[int, int]:
    start = data.rfind(b"\n", 0, pos) + 1
    end = data.find(b"\n", pos)
    return start, (len(data) if end < 0 else end)


def _bound_names(data: bytes, line_start: int, pos: int) -> Set[str]:
    """Names a binding on this line (or on up to 3 lines above, when they
    continue into it) may bind to the expression at ``pos``."""
    names: Set[str] = set()
    start, end = line_start, _line_at(data, line_start)[1]
    for _ in range(4):
        line = data[start:end]
        m = _LINE_BIND_RX.match(line)
        if m and start + m.end(1) <= pos:
            names.update(x.decode() for x in _BIND_TARGET_RX.findall(m.group(1)))
        m = _LINE_FOR_RX.match(line)
        if m:
            names.add(m.group(1).decode())
        if start == 0:
            break
        prev_start = data.rfind(b"\n", 0, start - 1) + 1
        if not data[prev_start : start - 1].rstrip().endswith(_CONT_ENDS):
            break
        start, end = prev_start, start - 1
    return names


def _is_tuple_target(data: bytes, line_start: int, pos: int, line_end: int) -> bool:
    """Whether the receiver at ``pos`` (followed by ``.attr,``, ``.attr)`` or
    ``.attr]``) may be an element of a target list: ``a.x, b = ...`` on one
    line, or one line of ``(\n    a.x,\n    b,\n) = ...``."""
    if _TUPLE_HEAD_RX.match(data, line_start, pos) and _LONE_EQ_RX.search(
        data, pos, line_end
    ):
        return True
    if not _ELEMENT_HEAD_RX.fullmatch(data, line_start, pos):
        return False
    if not data[pos:line_end].rstrip().endswith(b","):
        return False
    indent = pos - line_start
    start = line_end + 1
    for _ in range(300):  # the next line indented less closes the list
        if start >= len(data):
            return False
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        line = data[start:end]
        stripped = line.lstrip()
        if stripped and len(line) - len(stripped) < indent:
            return bool(_CLOSE_ASSIGN_RX.match(line))
        start = end + 1
    return False


def _scan_lines(data: bytes) -> Tuple[Set[str], List[int]]:
    """Over the lines that mention server_args / ServerArgs: names that may be
    bound to a ServerArgs, and offsets of writes that only the line shows
    (``del``, single-line tuple targets, ``<call>(...).x = ``)."""
    names: Set[str] = set()
    hits: List[int] = []
    seen: Set[int] = set()
    for literal in (b"server_args", b"ServerArgs"):
        pos = data.find(literal)
        while pos >= 0:
            line_start, line_end = _line_at(data, pos)
            if literal == b"ServerArgs" or not _ACCESS_AFTER_RX.match(data, pos + 11):
                names |= _bound_names(data, line_start, pos)
            if line_start not in seen:
                seen.add(line_start)
                line = data[line_start:line_end]
                if b":=" in line:
                    names.update(x.decode() for x in _WALRUS_RX.findall(line))
                if b"ServerArgs" in line:
                    cut = line.rfind(b"ServerArgs")
                    names.update(x.decode() for x in _ANN_NAME_RX.findall(line, 0, cut))
                if _LINE_DEL_RX.match(line) or _CALL_RECV_WRITE_RX.search(line):
                    hits.append(line_start)
            if literal == b"server_args":
                m = _ATTR_TAIL_RX.match(data, pos + 11)
                if m and not m.group(1):
                    if _is_tuple_target(data, line_start, pos, line_end):
                        hits.append(pos)
            pos = data.find(literal, pos + len(literal))
    return names, hits


def _alias_scan(data: bytes, names: Set[str]) -> Tuple[Set[str], List[int]]:
    """Close ``names`` over aliases of aliases (``b = a``) and find the writes
    on any of them: ``a.x = ``, ``a.x += ``, tuple targets, ``del a.x``."""
    aliases = {n for n in names if not _is_strong_name(n)} - {"self", "cls"}
    hits: List[int] = []
    frontier = set(aliases)
    while frontier:
        found: Set[str] = set()
        for name in sorted(frontier):
            word = name.encode()
            n = len(word)
            pos = data.find(word)
            while pos >= 0:
                before = data[pos - 1 : pos] if pos else b""
                after = data[pos + n : pos + n + 1]
                if not (before and (before.isalnum() or before in b"_.")) and not (
                    after and (after.isalnum() or after == b"_")
                ):
                    line_start, line_end = _line_at(data, pos)
                    if not _ACCESS_AFTER_RX.match(data, pos + n):
                        found |= _bound_names(data, line_start, pos)
                    m = _ATTR_TAIL_RX.match(data, pos + n)
                    if m:
                        if m.group(1) or _is_tuple_target(
                            data, line_start, pos, line_end
                        ):
                            hits.append(pos)
                    if _LINE_DEL_RX.match(data, line_start):
                        hits.append(pos)
                pos = data.find(word, pos + n)
        found = {x for x in found if not _is_strong_name(x)} - {"self", "cls"}
        frontier = found - aliases
        aliases |= frontier
    return aliases, hits


def _receiver_ident_before(data: bytes, pos: int) -> Tuple[bytes, bytes]:
    """For ``<recv>.override(`` at ``pos`` (start of ``override``): the last
    character of the receiver and, when it is a name, the name."""
    i = pos - 1
    while i >= 0 and data[i] in b" \t\r\n\\":
        i -= 1
    if i < 0 or data[i] != 46:  # "."
        return b"", b""
    i -= 1
    while i >= 0 and data[i] in b" \t\r\n\\":
        i -= 1
    if i < 0:
        return b"", b""
    end = i + 1
    while i >= 0 and (data[i] == 95 or data[i : i + 1].isalnum()):
        i -= 1
    return data[end - 1 : end], data[i + 1 : end]


def candidate_offsets(data: bytes) -> List[int]:
    """Offsets that may hold a writer site: a superset of what the syntax
    rules find, in code laid out the usual (black) way; see README
    "Pre-filter"."""
    has_sa = b"server_args" in data or b"ServerArgs" in data
    has_override = b"override" in data
    if not (has_sa or has_override):
        return []
    out: List[int] = []
    alias_words: Set[bytes] = set()
    if has_sa:
        names, hits = _scan_lines(data)
        out.extend(hits)
        aliases, hits = _alias_scan(data, names)
        out.extend(hits)
        alias_words = {a.encode() for a in aliases}
        out.extend(m.start() for m in _STRONG_WRITE_RX.finditer(data))
        if b"setattr" in data:
            for m in _SETATTR_RX.finditer(data):
                window = data[max(0, m.start() - 160) : m.end() + 200]
                if (
                    b"server_args" in window
                    or b"ServerArgs" in window
                    or any(w in window for w in alias_words)
                ):
                    out.append(m.start())
    if has_override:
        for m in _OVERRIDE_RX.finditer(data):
            pos = m.start()
            if pos and (data[pos - 1] == 95 or data[pos - 1 : pos].isalnum()):
                continue  # ..._override(
            last, ident = _receiver_ident_before(data, pos)
            if not last:
                continue
            if ident:
                if (
                    ident in (b"args", b"sa")
                    or ident.endswith(b"server_args")
                    or ident in alias_words
                ):
                    out.append(pos)
            elif last == b")" and has_sa:
                out.append(pos)
        out.extend(m.start() for m in _DECLARE_RX.finditer(data))
    return out


class _Lines:
    """Statement starts of a file, outside triple-quoted strings: at column
    0 for the whole file, and at a class's body indent per class (lazily)."""

    def __init__(self, data: bytes):
        self.data = data
        starts, ends = [], []
        for m in _STR_SCAN.finditer(data):
            if m.lastindex and data.count(b"\n", m.start(), m.end()):
                starts.append(m.start())
                ends.append(m.end())
        self.str_starts, self.str_ends = starts, ends
        self.top = self._starts(_TOP_RX, 0, len(data))
        self._members: Dict[int, Optional[Tuple[int, List[int]]]] = {}

    def in_string(self, pos: int) -> bool:
        i = bisect.bisect_right(self.str_starts, pos) - 1
        return i >= 0 and self.str_starts[i] < pos < self.str_ends[i]

    def _starts(self, rx, begin: int, end: int) -> List[int]:
        data, out = self.data, []
        for m in rx.finditer(data, begin, end):
            pos = m.start()
            if pos and data[pos - 1] != 10:
                continue  # (?m)^ at ``begin`` that is not a line start
            if self.in_string(pos):
                continue
            if data[max(0, pos - 3) : pos].rstrip(b"\r\n").endswith(b"\\"):
                continue  # backslash continuation
            out.append(pos)
        return out

    def members(self, begin: int, end: int) -> Optional[Tuple[int, List[int]]]:
        """(body indent, member starts) of the class spanning [begin, end)."""
        if begin not in self._members:
            first = _BODY_RX.search(self.data, begin, end)
            starts = None
            while first is not None and self.in_string(first.start()):
                first = _BODY_RX.search(self.data, first.end(), end)
            if first is not None:
                indent = len(first.group(1))
                rx = re.compile(rb"(?m)^( {1,%d})[^ \t\r\n#)\]}]" % indent)
                found = self._starts(rx, first.start(), end)
                if all(self.data[p + indent - 1] == 32 for p in found) and all(
                    self.data[p + indent] not in b" \t" for p in found
                ):
                    starts = (indent, found)
            self._members[begin] = starts
        return self._members[begin]


# column-0 statement starts; the first line of a class body
_TOP_RX = re.compile(rb"(?m)^[^ \t\r\n#)\]}]")
_BODY_RX = re.compile(rb"(?m)^( +)[^ \t\r\n#)\]}]")
_CLASS_NAME_RX = re.compile(rb"class[ \t]+(\w+)")


def _slice_for(data: bytes, lines: _Lines, pos: int):
    """(start, end, class name or None) of the top-level statement or class
    member holding ``pos``, or None when the file must be parsed whole."""
    top = lines.top
    i = bisect.bisect_right(top, pos) - 1
    if i < 0:
        return None
    top_end = top[i + 1] if i + 1 < len(top) else len(data)
    head = _HEADER_RX.match(data, top[i])
    if head is None:  # a module-level statement
        return top[i], top_end, None
    if head.group(0) == b"@":
        return None  # inside a decorator line
    first = i
    while first > 0 and data[top[first - 1]] == 64:  # "@"
        first -= 1
    if head.group(1) == b"def":
        return top[first], top_end, None
    name = _CLASS_NAME_RX.match(data, top[i])
    found = lines.members(top[i], top_end) if name else None
    if not found:
        return None
    indent, members = found
    k = bisect.bisect_right(members, pos) - 1
    if k < 0:
        return None
    mhead = _HEADER_RX.match(data, members[k] + indent)
    if mhead is None or mhead.group(0) == b"@":
        return None  # a class-level statement or decorator: parse the file
    first = k
    while first > 0 and data[members[first - 1] + indent] == 64:
        first -= 1
    end = members[k + 1] if k + 1 < len(members) else top_end
    return members[first], end, name.group(1).decode()


def sites_of_file_fast(rel: str, data: bytes, display_path: str) -> List[Site]:
    offsets = candidate_offsets(data)
    if not offsets:
        return []
    if b"\n\t" in data:  # tab indentation: the slicer counts spaces
        return sites_of_file(rel, data, display_path)
    lines = _Lines(data)
    slices = {}
    for pos in sorted(set(offsets)):
        if lines.in_string(pos):
            continue
        cut = _slice_for(data, lines, pos)
        if cut is None:
            return sites_of_file(rel, data, display_path)
        slices.setdefault(cut[0], cut)
    sites: List[Site] = []
    for start, end, class_name in slices.values():
        line_offset = data.count(b"\n", 0, start)
        chunk = data[start:end]
        try:
            if class_name is None:
                tree = ast.parse(chunk)
                collector = _Collector(rel, chunk, line_offset)
                collector.module(tree.body)
            else:
                wrapped = b"if 1:\n" + chunk
                tree = ast.parse(wrapped)
                collector = _Collector(rel, wrapped, line_offset - 1)
                collector.module(tree.body[0].body, (class_name,))
        except (SyntaxError, ValueError):
            return sites_of_file(rel, data, display_path)
        sites.extend(collector.sites)
    return sites


# ---------------------------------------------------------------------------
# Tree walking
# ---------------------------------------------------------------------------


def resolve_root(root: Optional[str]) -> str:
    """The sglang package directory to scan."""
    if root is None:
        spec = importlib.util.find_spec("sglang")
        locations = list(spec.submodule_search_locations or []) if spec else []
        if not locations:
            raise BadInput(
                f"sglang is not installed for {sys.executable}; expected an "
                "installed sglang package, or pass --root PATH/python/sglang "
                "of a fork checkout"
            )
        return os.path.abspath(locations[0])
    path = os.path.abspath(root)
    if not os.path.exists(path):
        raise BadInput(
            f"--root {root} does not exist; expected the sglang package "
            "directory (an installed site-packages/sglang, or python/sglang "
            "of a fork checkout)"
        )
    if not os.path.isdir(path):
        raise BadInput(
            f"--root {root} is not a directory; expected the sglang package "
            "directory (site-packages/sglang or python/sglang)"
        )
    for sub in (("python", "sglang"), ("sglang",)):
        nested = os.path.join(path, *sub)
        if os.path.isfile(os.path.join(nested, "__init__.py")) and not os.path.isfile(
            os.path.join(path, "__init__.py")
        ):
            return nested  # a fork checkout or a site-packages directory
    return path


def python_files(root: str, excluded: Sequence[str] = EXCLUDED_DIRS) -> List[str]:
    """Relative, "/"-separated paths of the .py files to scan, sorted."""
    skip = set(excluded)
    out: List[str] = []
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            it = os.scandir(os.path.join(root, rel_dir) if rel_dir else root)
        except OSError as exc:
            raise BadInput(f"cannot read {exc.filename}: {exc.strerror}") from None
        with it:
            for entry in it:
                name = entry.name
                rel = f"{rel_dir}/{name}" if rel_dir else name
                if entry.is_dir(follow_symlinks=False):
                    if name == "__pycache__" or name.startswith("."):
                        continue
                    if rel in skip:
                        continue
                    stack.append(rel)
                elif name.endswith(".py"):
                    out.append(rel)
    out.sort()
    return out


def read_bytes(path: str) -> bytes:
    with open(path, "rb", buffering=0) as fh:
        return fh.readall()


def collect_sites(root: str, prefilter: bool = True) -> Tuple[List[Site], int]:
    """All writer sites under ``root`` (a package directory), and the number
    of files scanned."""
    files = python_files(root)
    if not files:
        raise BadInput(
            f"no Python files under {root}; expected the sglang package "
            "directory (with srt/, managers/, ...): an installed "
            "site-packages/sglang, or python/sglang of a fork checkout"
        )
    scan = sites_of_file_fast if prefilter else sites_of_file
    sites: List[Site] = []
    with warnings.catch_warnings():
        # the parser's warnings (invalid escapes, ...) are not ours to report
        warnings.simplefilter("ignore")
        for rel in files:
            path = os.path.join(root, rel)
            try:
                data = read_bytes(path)
            except OSError as exc:
                raise BadInput(f"cannot read {path}: {exc.strerror}") from None
            sites.extend(scan(rel, data, _display(path)))
    sites.sort(key=lambda s: (s.file, s.line, s.write))
    return sites, len(files)


def upstream_regex_count(root: str) -> Tuple[int, List[Tuple[str, int, str]]]:
    """Upstream's plain-text rule: matches of server_args.override( /
    args.override( / sa.override( in every .py except srt/server_args.py,
    srt/arg_groups/ and multimodal_gen/, comments and docstrings included."""
    matches = []
    for rel in python_files(root, UPSTREAM_EXCLUDED_DIRS):
        if rel in UPSTREAM_EXCLUDED_FILES:
            continue
        data = read_bytes(os.path.join(root, rel))
        for m in UPSTREAM_REGEX.finditer(data):
            line = data.count(b"\n", 0, m.start()) + 1
            start = data.rfind(b"\n", 0, m.start()) + 1
            end = data.find(b"\n", m.start())
            text = data[start : end if end >= 0 else len(data)]
            matches.append((rel, line, text.decode("utf-8", "replace").strip()))
    return len(matches), matches


def _display(path: str) -> str:
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def package_version(root: str) -> Optional[str]:
    for name in ("_version.py", "version.py"):
        try:
            with open(os.path.join(root, name), "r", encoding="utf-8") as fh:
                text = fh.read()
        except OSError:
            continue
        m = re.search(
            r"""__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", text
        )
        if m:
            return m.group(1)
    return None


# ---------------------------------------------------------------------------
# Baseline
# ---------------------------------------------------------------------------


def site_record(site: Site) -> Dict[str, object]:
    return {
        "file": site.file,
        "function": site.function,
        "kind": site.kind,
        "write": site.write,
        "line": site.line,
    }


def write_baseline(path: str, root: str, sites: List[Site]) -> None:
    doc = {
        "about": (
            "ServerArgs writer sites counted by scripts/ratchet/writer_ratchet.py; "
            "regenerate with: python scripts/ratchet/writer_ratchet.py --update. "
            "A site's key is file + function + write; line is informational."
        ),
        "rules_version": RULES_VERSION,
        "sglang_version": package_version(root),
        "count": len(sites),
        "by_kind": dict(sorted(Counter(s.kind for s in sites).items())),
        "sites": [site_record(s) for s in sites],
    }
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, ensure_ascii=False)
        fh.write("\n")
    os.replace(tmp, path)


def read_baseline(path: str) -> Dict[str, object]:
    try:
        with open(path, "r", encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        raise BadInput(
            f"baseline {path} does not exist; create it with --update"
        ) from None
    except (OSError, ValueError) as exc:
        raise BadInput(
            f"baseline {path} is not readable JSON ({exc}); regenerate it with "
            "--update"
        ) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("sites"), list):
        raise BadInput(
            f"baseline {path} has no 'sites' list; regenerate it with --update"
        )
    if doc.get("rules_version") != RULES_VERSION:
        raise BadInput(
            f"baseline {path} was made by rules version {doc.get('rules_version')}, "
            f"this script is version {RULES_VERSION}; regenerate it with --update"
        )
    return doc


def _key_of(record: Dict[str, object]) -> Tuple[str, str, str]:
    return (str(record["file"]), str(record["function"]), str(record["write"]))


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------


def _format_site(root: str, site: Site) -> str:
    path = _display(os.path.join(root, site.file))
    return f"{path}:{site.line}: {site.code}  [{site.kind} in {site.function}]"


def _update_command(argv: Sequence[str]) -> str:
    exe = sys.executable
    rel = os.path.relpath(exe)
    python = exe if rel.startswith("..") else rel  # the interpreter that found sglang
    script = os.path.relpath(os.path.abspath(__file__))
    if script.startswith(".."):
        script = os.path.abspath(__file__)
    keep: List[str] = []
    skip_next = False
    for i, arg in enumerate(argv):
        if skip_next:
            skip_next = False
            continue
        if arg in ("--root", "--baseline"):
            keep.extend(argv[i : i + 2])
            skip_next = True
        elif arg.startswith(("--root=", "--baseline=")):
            keep.append(arg)
    return shlex.join([python, script, *keep, "--update"])


def build_parser() -> argparse.ArgumentParser:
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(
        prog="writer_ratchet.py",
        description=doc.split("\n\n", 1)[0],
        epilog=doc.split("\n\n", 1)[1] if "\n\n" in doc else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--root",
        help="sglang package directory to scan (default: the installed sglang; "
        "a fork checkout's root or python/sglang also works)",
    )
    parser.add_argument(
        "--baseline",
        default=DEFAULT_BASELINE,
        help="baseline file (default: %(default)s)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--update",
        action="store_true",
        help="write the current sites to the baseline (lock in a reduction)",
    )
    mode.add_argument(
        "--list", action="store_true", help="print every site and the count"
    )
    mode.add_argument(
        "--upstream-regex-count",
        action="store_true",
        help="print the count by upstream's plain-regex rule (with --verbose: "
        "every match)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="also fail when the count is unchanged but the sites are not the "
        "same (a write moved to another function, or one came as another went)",
    )
    parser.add_argument(
        "--no-prefilter",
        action="store_true",
        help="parse every file in full (slow; must give the same sites)",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="with --upstream-regex-count: print every match",
    )
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        return _run(args, argv)
    except BadInput as exc:
        print(f"writer ratchet: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # piped into head & co.: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_RATCHET


def _run(args, argv: Sequence[str]) -> int:
    root = resolve_root(args.root)
    shown_root = _display(root)
    if args.upstream_regex_count:
        count, matches = upstream_regex_count(root)
        if args.verbose:
            for rel, line, text in matches:
                print(f"{_display(os.path.join(root, rel))}:{line}: {text}")
        print(
            f"upstream regex count: {count} matches of {UPSTREAM_REGEX.pattern.decode()} "
            f"in {shown_root} (excluding srt/server_args.py, srt/arg_groups/, "
            "multimodal_gen/; comments and docstrings included)"
        )
        return EXIT_OK

    sites, nfiles = collect_sites(root, prefilter=not args.no_prefilter)

    if args.list:
        for site in sites:
            print(_format_site(root, site))
        kinds = ", ".join(
            f"{k} {v}" for k, v in sorted(Counter(s.kind for s in sites).items())
        )
        print(
            f"{len(sites)} ServerArgs writer sites in {shown_root} ({nfiles} files; {kinds})"
        )
        return EXIT_OK

    if args.update:
        old = None
        if os.path.exists(args.baseline):
            try:
                old = read_baseline(args.baseline).get("count")
            except BadInput:
                old = None
        write_baseline(args.baseline, root, sites)
        was = f" (was {old})" if old is not None else ""
        print(
            f"writer ratchet: baseline {_display(args.baseline)} now records "
            f"{len(sites)} ServerArgs writer sites{was}"
        )
        return EXIT_OK

    baseline = read_baseline(args.baseline)
    base_records = baseline["sites"]
    base_keys = Counter(_key_of(r) for r in base_records)
    cur_keys = Counter(s.key for s in sites)
    new_keys = cur_keys - base_keys
    gone_keys = base_keys - cur_keys
    count, base_count = len(sites), len(base_records)

    if not new_keys and not gone_keys:
        print(
            f"writer ratchet: OK, {count} ServerArgs writer sites in {shown_root} "
            f"(baseline {base_count})"
        )
        return EXIT_OK

    new_sites = []
    remaining = Counter(new_keys)
    for site in reversed(sites):  # the last occurrences of a key are the new ones
        if remaining[site.key] > 0:
            remaining[site.key] -= 1
            new_sites.append(site)
    new_sites.reverse()
    gone = []
    remaining = Counter(gone_keys)
    for record in base_records:
        if remaining[_key_of(record)] > 0:
            remaining[_key_of(record)] -= 1
            gone.append(record)
    update = _update_command(argv)

    def print_new(title: str) -> None:
        if new_sites:
            print(title)
            for site in new_sites:
                print(f"  {_format_site(root, site)}")

    def print_gone(title: str) -> None:
        if gone:
            print(title)
            for r in gone:
                print(
                    f"  {r['file']} (in {r['function']}, was line {r['line']}): {r['write']}"
                )

    if count > base_count:
        print(
            f"writer ratchet: FAILED: ServerArgs writer sites grew from "
            f"{base_count} to {count} in {shown_root}."
        )
        print_new("New sites (not in the baseline):")
        print_gone("Baseline sites no longer found (moved or removed):")
        print(
            "Do not write onto a shared ServerArgs: give the component its own "
            "copy, or pass the value explicitly. If the new write is reviewed "
            f"and intended, record it with: {update}"
        )
        return EXIT_RATCHET
    if count < base_count:
        print(
            f"writer ratchet: FAILED: ServerArgs writer sites shrank from "
            f"{base_count} to {count} in {shown_root}. Good: lock the progress "
            f"in by lowering the baseline with: {update}"
        )
        print_gone("Sites gone:")
        print_new("New sites (not in the baseline):")
        return EXIT_RATCHET
    # same count, different sites: writes moved to another function or file
    # (or one came while another went)
    verdict = "FAILED (--strict)" if args.strict else "OK"
    print(
        f"writer ratchet: {verdict}, {count} ServerArgs writer sites in "
        f"{shown_root} as in the baseline, but not all the same ones."
    )
    print_new("New sites (not in the baseline):")
    print_gone("Baseline sites no longer found:")
    print(f"If these are the same writes moved, refresh the list with: {update}")
    return EXIT_RATCHET if args.strict else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
