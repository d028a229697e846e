"""Every write onto a ServerArgs in an sglang package: this repository's
whole-package count, for its own regression test (test_writer_ratchet_sglang.py:
75 sites on sglang 0.5.16 as released, 70 patched). It is not shipped.

This is the fuller walk the shipped ratchet (scripts/ratchet/writer_ratchet.py)
had up to Backport-Revision 5, when it also listed the whole package. A write
is R.override(...) (also args.override, sa.override), R.field = ...,
R.field += ..., del R.field (also in a tuple, or as a for or with target),
setattr(R, ...), object.__setattr__(R, ...) or declare_load_time_override(...),
where R is a ServerArgs, which here means:
  - a name or attribute server_args or *_server_args (self.draft_server_args);
  - a call of ServerArgs(...), ServerArgs.*(...), or *server_args(...) or
    *server_args_copy(...) but not set_*, _set_* or override_*;
  - a call named copy, deepcopy or replace of an R (copy.deepcopy(server_args));
  - a name annotated ServerArgs, or bound to an R (cfg = self.server_args) in
    its function or in a function or module around it, unless a parameter
    hides it;
  - never self.
Each file is parsed whole with ast, so comments, strings and layout never
count.
"""

import ast
import os
import re
from typing import NamedTuple

# A file is parsed if its text holds one of these.
MENTIONS = (b"server_args", b"ServerArgs", b"override")
# Folders of the package (with a trailing /) whose files are not scanned:
# the resolution pipeline, and multimodal_gen's own ServerArgs.
NOT_SCANNED = re.compile(
    r"srt/arg_groups/|multimodal_gen/|(.*/)?(__pycache__|\.[^/]*)/"
)
SERVER_ARGS_NAME = re.compile(r"(\w*_)?server_args$")
SERVER_ARGS_FUNCTION = re.compile(r"(?!set_|_set_|override_)\w*server_args(_copy)?$")
SERVER_ARGS_TYPE = re.compile(r"\bServerArgs\b")
COPY_FUNCTIONS = ("copy", "deepcopy", "replace")
SHORT_NAMES = ("args", "sa")  # their .override(...) counts whatever they hold
# (function, name of what it is an attribute of): setattr, object.__setattr__
SETTERS = {("setattr", None), ("__setattr__", "object")}
# The walk of a scope keeps the nodes that can write onto a ServerArgs or bind a
# name to one, and the scopes in it, whose code is walked on their own. Both
# sets are looked up by type(node): faster than isinstance on so many nodes.
SCOPES = {ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef}
ASSIGNMENTS = {ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete, ast.NamedExpr}
KEPT = {ast.Call, *ASSIGNMENTS, ast.For, ast.AsyncFor, ast.withitem, *SCOPES}
NOT_ENTERED = {*SCOPES, ast.Name, ast.Constant, ast.Load, ast.Store, ast.Del}
LONGEST_CODE = 160

SiteKey = tuple[str, str, str]  # file, function, write


class BadInput(Exception):
    """Bad input: the scan stops with this one line."""


class Site(NamedTuple):
    """One place that writes onto a ServerArgs."""

    file: str  # relative to the package directory
    function: str  # Class.method, function.inner, or <module>
    kind: str  # override, assign, setattr or declare
    line: int
    write: str  # the write less its values: "server_args.port ="
    code: str  # its source on one line


class Scan(NamedTuple):
    """What a scan of a package directory found."""

    sites: list[Site]  # by file, line and write
    files: int  # the .py files scanned
    parsed: int  # those that name a ServerArgs, which were parsed


def site_key(site: Site) -> SiteKey:
    """What makes two sites the same: file, function and write."""
    return (site.file, site.function, site.write)


def name_of(node: ast.AST | None) -> str | None:
    """The name of a Name, the attribute of an Attribute; else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def receiver_of(call: ast.Call) -> ast.expr | None:
    """What a called function is an attribute of: R in R.override(...)."""
    if isinstance(call.func, ast.Attribute):
        return call.func.value
    return None


def is_server_args(node: ast.AST | None, aliases: set[str]) -> bool:
    """Whether an expression is a ServerArgs (an R of the module docstring)."""
    if isinstance(node, ast.Name):
        return bool(SERVER_ARGS_NAME.match(node.id)) or node.id in aliases
    if isinstance(node, ast.Attribute):
        return bool(SERVER_ARGS_NAME.match(node.attr))
    if isinstance(node, ast.Call):
        return returns_server_args(node, aliases)
    return False


def returns_server_args(call: ast.Call, aliases: set[str]) -> bool:
    """Whether a call gives a ServerArgs: a constructor, a getter or a copy."""
    function = name_of(call.func)
    if function is None:
        return False
    if function in COPY_FUNCTIONS:
        return bool(call.args) and is_server_args(call.args[0], aliases)
    if "ServerArgs" in (function, name_of(receiver_of(call))):
        return True
    return bool(SERVER_ARGS_FUNCTION.match(function))


def shown_argument(argument: ast.expr, aliases: set[str]) -> str:
    """An argument of a write as its key shows it: a constant, an R, dict keys."""
    if isinstance(argument, ast.Dict) and None not in argument.keys:
        keys = sorted(ast.unparse(key) for key in argument.keys)
        return "{" + ", ".join(keys) + "}"
    if isinstance(argument, ast.Constant) or is_server_args(argument, aliases):
        return ast.unparse(argument)
    return "..."


def call_without_values(call: ast.Call, aliases: set[str], shown: int) -> str:
    """A write call less its values: R.override('source', port=...)."""
    parts = []
    for position, argument in enumerate(call.args):
        if position < shown:
            parts.append(shown_argument(argument, aliases))
        else:
            parts.append("...")
    named = [keyword.arg for keyword in call.keywords if keyword.arg is not None]
    parts += sorted(f"{name}=..." for name in named)
    for keyword in call.keywords:
        if keyword.arg is None:  # **mapping
            parts.append(f"**{name_of(keyword.value) or '...'}")
    return f"{ast.unparse(call.func)}({', '.join(parts)})"


def attributes_set_by(target: ast.expr | None) -> list[ast.Attribute]:
    """The attributes an assignment target sets, out of tuples, lists, stars."""
    if isinstance(target, (ast.Tuple, ast.List)):
        found = []
        for element in target.elts:
            found += attributes_set_by(element)
        return found
    if isinstance(target, ast.Starred):
        return attributes_set_by(target.value)
    if isinstance(target, ast.Attribute):
        return [target]
    return []


def field_of(attribute: ast.Attribute) -> str:
    """The field an attribute names, as its key shows it: server_args.port."""
    return f"{ast.unparse(attribute.value)}.{attribute.attr}"


def nodes_in_scope(scope: ast.AST) -> list[ast.AST]:
    """The KEPT nodes of a scope's own code: an inner def or class, not its code."""
    # A list, not recursion: ast parses expressions nested deeper than a
    # recursive walk can follow on Python's stack.
    found = []
    waiting = list(ast.iter_child_nodes(scope))
    while waiting:
        node = waiting.pop()
        if type(node) in KEPT:
            found.append(node)
        if type(node) not in NOT_ENTERED:
            waiting.extend(ast.iter_child_nodes(node))
    return found


def parameters_of(scope: ast.AST) -> list[ast.arg]:
    """The parameters of a function; none for a module or a class."""
    if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return []
    arguments = scope.args
    found = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    found += [arguments.vararg, arguments.kwarg]
    return [parameter for parameter in found if parameter is not None]


def names_server_args(annotation: ast.expr | None) -> bool:
    """Whether an annotation names ServerArgs (Optional["ServerArgs"] too)."""
    if annotation is None:
        return False
    return bool(SERVER_ARGS_TYPE.search(ast.unparse(annotation)))


def names_bound_by(node: ast.AST) -> list[tuple[str, ast.expr]]:
    """(name, value) of name = value, name: T = value and (name := value)."""
    if isinstance(node, ast.Assign):
        names = [target for target in node.targets if isinstance(target, ast.Name)]
        return [(name.id, node.value) for name in names]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        if node.value is not None:
            return [(node.target.id, node.value)]
    if isinstance(node, ast.NamedExpr):
        return [(node.target.id, node.value)]
    return []


def aliases_in_scope(
    scope: ast.AST, nodes: list[ast.AST], enclosing: set[str]
) -> set[str]:
    """The names that hold a ServerArgs anywhere in a scope.

    They are the aliases of the scope around it that no parameter hides, the
    names annotated ServerArgs, and the names bound here to an R; never self.
    """
    parameters = parameters_of(scope)
    aliases = enclosing - {parameter.arg for parameter in parameters}
    for parameter in parameters:
        if names_server_args(parameter.annotation):
            aliases.add(parameter.arg)
    bindings = []
    for node in nodes:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if names_server_args(node.annotation):
                aliases.add(node.target.id)
        bindings += names_bound_by(node)
    while True:  # until no binding adds a name: b = a; a = get_server_args()
        more = set()
        for name, value in bindings:
            if name not in aliases and is_server_args(value, aliases):
                more.add(name)
        if not more:
            break
        aliases |= more
    aliases.discard("self")
    return aliases


def code_of(lines: list[bytes], node: ast.AST) -> str:
    """A node's source on one line, spaces squeezed, cut at 160 characters."""
    source = lines[node.lineno - 1 : node.end_lineno]
    source[-1] = source[-1][: node.end_col_offset]  # offsets count UTF-8 bytes
    code = b"\n".join(source)[node.col_offset :].decode("utf-8", "replace")
    code = " ".join(code.replace("\\\n", " ").split())
    code = re.sub(r"([(\[{]) ", r"\1", code)  # "( a" -> "(a"
    code = re.sub(r",? ([)\]}])", r"\1", code)  # "a, )" -> "a)"
    if len(code) > LONGEST_CODE:
        code = code[: LONGEST_CODE - 3] + "..."
    return code


class WriteFinder(ast.NodeVisitor):
    """Finds the writes onto a ServerArgs in one scope and the scopes in it.

    A scope is the module, a class body or a function. Each def or class in it
    is a scope of its own, with a finder of its own.
    """

    def __init__(
        self, file: str, lines: list[bytes], qualname: list[str], enclosing: set[str]
    ) -> None:
        """Get ready for one scope of a file, given the aliases around it."""
        self.file = file
        self.lines = lines  # the file's source
        self.qualname = qualname  # ["Class", "method"]; [] for the module
        self.function = ".".join(qualname) or "<module>"
        self.enclosing = enclosing  # the aliases of the scope around this one
        self.aliases: set[str] = set()
        self.inner: set[str] = set()  # the aliases the scopes in this one start from
        self.sites: list[Site] = []

    def find(self, scope: ast.AST) -> list[Site]:
        """The sites of a scope and of the scopes in it."""
        nodes = nodes_in_scope(scope)
        self.aliases = aliases_in_scope(scope, nodes, self.enclosing)
        self.inner = self.aliases
        if isinstance(scope, ast.ClassDef):  # methods see the names around a class
            self.inner = self.enclosing
        for node in nodes:
            self.visit(node)
        return self.sites

    def record(self, node: ast.AST, kind: str, write: str) -> None:
        """Add the site of a write, shown as node."""
        code = code_of(self.lines, node)
        site = Site(self.file, self.function, kind, node.lineno, write, code)
        self.sites.append(site)

    def fields_set_by(self, target: ast.expr | None) -> list[ast.Attribute]:
        """The attributes of a ServerArgs that an assignment target sets."""
        attributes = attributes_set_by(target)
        return [each for each in attributes if is_server_args(each.value, self.aliases)]

    def generic_visit(self, node: ast.AST) -> None:
        """Other nodes write nothing (nodes_in_scope lists their children)."""

    def find_inner(
        self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
    ) -> None:
        """Add the sites of a def or class in this scope."""
        qualname = [*self.qualname, node.name]
        finder = WriteFinder(self.file, self.lines, qualname, self.inner)
        self.sites += finder.find(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        """Add the sites of a function defined here."""
        self.find_inner(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        """Add the sites of an async function defined here."""
        self.find_inner(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        """Add the sites of a class defined here."""
        self.find_inner(node)

    def visit_Call(self, node: ast.Call) -> None:
        """Add declare_load_time_override(...), R.override(...), setattr(R, ...)."""
        function = name_of(node.func)
        receiver = receiver_of(node)
        if function == "declare_load_time_override":
            self.record(node, "declare", call_without_values(node, self.aliases, 2))
        elif function == "override" and self.is_override_receiver(receiver):
            self.record(node, "override", call_without_values(node, self.aliases, 1))
        elif self.is_setattr_onto_server_args(node):
            self.record(node, "setattr", call_without_values(node, self.aliases, 2))

    def is_override_receiver(self, receiver: ast.expr | None) -> bool:
        """Whether .override(...) is called on an R, or on args or sa."""
        if isinstance(receiver, ast.Name) and receiver.id in SHORT_NAMES:
            return True
        return is_server_args(receiver, self.aliases)

    def is_setattr_onto_server_args(self, call: ast.Call) -> bool:
        """Whether a call is setattr(R, ...) or object.__setattr__(R, ...)."""
        if (name_of(call.func), name_of(receiver_of(call))) not in SETTERS:
            return False
        return bool(call.args) and is_server_args(call.args[0], self.aliases)

    def visit_Assign(self, node: ast.Assign) -> None:
        """Add R.field = ... (also R.field, b = ... and a = R.field = ...)."""
        for target in node.targets:
            for attribute in self.fields_set_by(target):
                self.record(node, "assign", f"{field_of(attribute)} =")

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        """Add R.field += ..., keyed as R.field = is."""
        for attribute in self.fields_set_by(node.target):
            self.record(node, "assign", f"{field_of(attribute)} =")

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        """Add R.field: T = ...; a bare R.field: T sets nothing."""
        if node.value is not None:
            for attribute in self.fields_set_by(node.target):
                self.record(node, "assign", f"{field_of(attribute)} =")

    def visit_Delete(self, node: ast.Delete) -> None:
        """Add del R.field."""
        for target in node.targets:
            for attribute in self.fields_set_by(target):
                self.record(node, "assign", f"del {field_of(attribute)}")

    def record_loop_target(self, target: ast.expr | None) -> None:
        """Add each R.field a for or with statement sets, shown as the field."""
        for attribute in self.fields_set_by(target):
            self.record(attribute, "assign", f"{field_of(attribute)} =")

    def visit_For(self, node: ast.For) -> None:
        """Add for R.field in ...: a field the loop sets."""
        self.record_loop_target(node.target)

    def visit_AsyncFor(self, node: ast.AsyncFor) -> None:
        """Add async for R.field in ...: a field the loop sets."""
        self.record_loop_target(node.target)

    def visit_withitem(self, node: ast.withitem) -> None:
        """Add with ... as R.field: a field the with statement sets."""
        self.record_loop_target(node.optional_vars)


def mentions_server_args(data: bytes) -> bool:
    """Whether a file's text names server_args, ServerArgs or override."""
    return any(word in data for word in MENTIONS)


def file_sites(file: str, data: bytes, shown_as: str) -> list[Site]:
    """The sites in one file's source; a parse error names it shown_as."""
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError) as error:
        where = shown_as
        if getattr(error, "lineno", None):
            where = f"{shown_as}:{error.lineno}"
        reason = getattr(error, "msg", None) or error
        raise BadInput(f"{where}: cannot parse ({reason}); fix it") from error
    return WriteFinder(file, data.splitlines(), [], set()).find(tree)


def shown(path: str) -> str:
    """A path as the report shows it: relative to here unless it is above."""
    relative = os.path.relpath(path)
    if relative.startswith(".."):
        return path
    return relative


def python_files(root: str) -> list[str]:
    """The .py files to scan under root, relative to it, in os.walk order."""
    found = []
    for folder, _, names in os.walk(root):
        relative = (os.path.relpath(folder, root) + "/").removeprefix("./")
        if not NOT_SCANNED.match(relative):
            found += [relative + name for name in names if name.endswith(".py")]
    return found


def scan(root: str) -> Scan:
    """The sites in the package directory root."""
    files = python_files(root)
    if not files:
        raise BadInput(f"no Python files in {shown(root)}; pass the sglang package")
    sites = []
    parsed = 0
    for file in files:
        path = os.path.join(root, file)
        with open(path, "rb") as source:
            data = source.read()
        if mentions_server_args(data):
            sites += file_sites(file, data, shown(path))
            parsed += 1
    sites.sort(key=lambda site: (site.file, site.line, site.write))
    return Scan(sites, len(files), parsed)
