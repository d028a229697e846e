#!/usr/bin/env python3
"""Writer ratchet: fail when the number of writes onto a ServerArgs changes.

In sglang 0.5.16 the scheduler, the target worker and get_server_args() share
one ServerArgs, so what one of them writes onto it, the others read. This
script counts the places in an sglang tree that write onto a ServerArgs and
fails when the count is not the baseline's, so that no new write goes unseen.

A write is R.override(...) (also args.override, sa.override), R.field = ...,
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
Three of the 75 writes of sglang 0.5.16 as released (--list shows them all):

    srt/managers/scheduler.py, in Scheduler.maybe_init_draft_worker:
        self.server_args.override("scheduler.draft_load_format", load_format=...)
    srt/disaggregation/encode_server.py, in run_dp_worker:
        args = copy.deepcopy(server_args)
        args.base_gpu_id = gpu_id
    srt/model_executor/model_runner_components/load_model_utils.py:
        declare_load_time_override("ModelRunner._sm80_dtype_fallback", {...})

Each .py file whose text names server_args, ServerArgs or override is parsed
whole with ast, so comments, strings and layout never count; srt/arg_groups/
(the resolution pipeline) and multimodal_gen/ (another ServerArgs) are not
scanned. A site is its file, its function and its write less the values, so a
moved line or an edited value is no new site.

It scans --root, else python/sglang of the checkout holding this script, else
the installed sglang. It compares with --baseline, else baseline.txt beside
this script, else the same tree at the git commit that added this script (so a
fork needs no step after git am).

When it fails it lists the new sites as file:line: code  [kind in function].
Give the component its own copy of the ServerArgs, or pass it the value. If
the change is reviewed and meant (a lower count fails too), record it with
--update and commit scripts/ratchet/baseline.txt. Exit status: 0 the count is
the baseline's, 1 it changed, 2 bad input (one line; nothing is written).
"""

import ast
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import warnings
from argparse import ArgumentParser, Namespace, RawDescriptionHelpFormatter
from collections import Counter
from typing import NamedTuple

SCRIPT_PATH = os.path.realpath(__file__)
CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(SCRIPT_PATH)))
SCRIPT = os.path.relpath(SCRIPT_PATH, CHECKOUT)  # scripts/ratchet/writer_ratchet.py
DEFAULT_BASELINE = os.path.join(os.path.dirname(SCRIPT_PATH), "baseline.txt")
# A file is parsed if its text holds one of these.
MENTIONS = (b"server_args", b"ServerArgs", b"override")
# Folders of the package (with a trailing /) whose files are not scanned.
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
BASELINE_HEADER = re.compile(r"# writer_ratchet\.py baseline: (\d+) sites in ")

SiteKey = tuple[str, str, str]  # file, function, write


class BadInput(Exception):
    """Bad input: the check stops with this one line and writes nothing."""


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


class Tree(NamedTuple):
    """The package directory to scan."""

    root: str
    about: str  # how the report names it
    in_checkout: bool  # whether it is python/sglang of this script's checkout


class Baseline(NamedTuple):
    """The sites a check compares with."""

    keys: list[SiteKey]
    source: str  # how the report names it


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


def installed_sglang() -> str | None:
    """The directory of the sglang that import sglang finds, if any."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.origin:
        return None
    return os.path.dirname(spec.origin)


def resolve_tree(root: str | None) -> Tree:
    """The tree to scan: --root, else the checkout's, else the installed one."""
    checkouts = os.path.join(CHECKOUT, "python", "sglang")
    about = ""
    if root is None and os.path.isdir(checkouts):
        root = checkouts
    elif root is None:
        root = installed_sglang()
        if root is None:
            raise BadInput(
                f"no {shown(checkouts)} and no sglang installed; pass --root"
            )
        about = " (the installed sglang)"
    package = os.path.realpath(root)
    if not os.path.isdir(package):
        raise BadInput(
            f"--root {root} is not a directory; pass the sglang package directory"
        )
    if package == checkouts:
        about = f" (the checkout {shown(CHECKOUT)})"
    return Tree(package, shown(package) + about, package == checkouts)


def git(folder: str, *args: str) -> str | None:
    """The output of a git command run in folder; None if it fails."""
    result = subprocess.run(["git", "-C", folder, *args], capture_output=True)
    if result.returncode != 0:
        return None
    return os.fsdecode(result.stdout)


def git_paths(root: str, command: list[str], commit: str) -> set[str]:
    """The paths under root that git ls-tree or git diff lists for a commit."""
    output = git(root, *command, "-z", "--name-only", commit)
    if not output:
        return set()
    return set(output.split("\0")[:-1])


def sites_at_ratchet_commit(tree: Tree, sites: list[Site]) -> Baseline:
    """The tree's sites at the git commit that added this script."""
    added = ["log", "-1", "--diff-filter=A", "--format=%H %h %D", "--", SCRIPT_PATH]
    log = git(tree.root, *added)
    if not log:
        raise BadInput(
            f"no baseline for {tree.about}: no git commit added {SCRIPT}; "
            "record one with --update"
        )
    words = log.split()  # full hash, short hash, ref names
    commit = words[0]
    short = words[1]
    if "grafted" in log:  # the first commit of a shallow clone
        raise BadInput(
            f"{shown(CHECKOUT)} is a shallow clone cut at {short}, the commit that "
            f"added {SCRIPT}: git fetch --unshallow"
        )
    # Files unchanged since keep the sites just found; changed ones are parsed
    # as they were then.
    tracked = git_paths(tree.root, ["ls-tree", "-r"], commit)
    changed = git_paths(tree.root, ["diff", "--relative", "--no-renames"], commit)
    keys = [site_key(site) for site in sites if site.file in tracked - changed]
    for file in sorted(tracked & changed):
        if file.endswith(".py") and not NOT_SCANNED.match(file):
            data = os.fsencode(git(tree.root, "show", f"{commit}:./{file}") or "")
            if mentions_server_args(data):
                then = file_sites(file, data, f"{file} at {short}")
                keys += [site_key(site) for site in then]
    return Baseline(keys, f"{short}, the commit that added {SCRIPT}")


def read_baseline(path: str) -> list[SiteKey]:
    """The key of each site a baseline file records."""
    try:
        with open(path, encoding="utf-8") as baseline:
            lines = baseline.read().splitlines()
    except (OSError, ValueError) as error:  # missing, or not UTF-8
        raise BadInput(
            f"cannot read {shown(path)} ({error}); record it with --update"
        ) from error
    header = None
    if lines:
        header = BASELINE_HEADER.match(lines[0])
    rows = [line.split("\t") for line in lines[1:]]
    if header is None or int(header[1]) != len(rows):
        raise BadInput(f"baseline {shown(path)} is corrupt; redo it with --update")
    if any(len(row) != 5 for row in rows):
        raise BadInput(f"baseline {shown(path)} is corrupt; redo it with --update")
    return [(row[0], row[1], row[4]) for row in rows]


def is_writable(path: str) -> bool:
    """Whether path has a write bit and may be written (root needs no bit)."""
    return bool(os.stat(path).st_mode & 0o222) and os.access(path, os.W_OK)


def write_baseline(path: str, about: str, sites: list[Site]) -> None:
    """Record sites in the baseline file at path."""
    for target in (path, os.path.dirname(path) or "."):
        if os.path.exists(target) and not is_writable(target):
            raise BadInput(f"{shown(target)} is read-only; chmod u+w it")
    columns = "file, function, kind, line (not compared), write"
    lines = [f"# writer_ratchet.py baseline: {len(sites)} sites in {about}; {columns}"]
    for site in sites:
        row = [site.file, site.function, site.kind, str(site.line), site.write]
        lines.append("\t".join(row))
    try:
        with open(path, "w", encoding="utf-8") as baseline:
            baseline.write("\n".join(lines) + "\n")
    except OSError as error:
        raise BadInput(
            f"cannot write {shown(path)} ({error.strerror}); pass --baseline"
        ) from error


def new_sites(sites: list[Site], baseline: list[SiteKey]) -> list[Site]:
    """The sites beyond the baseline's: of a key n times more, the last n."""
    extra = Counter(site_key(site) for site in sites) - Counter(baseline)
    new = []
    for site in reversed(sites):
        if extra[site_key(site)] > 0:
            extra[site_key(site)] -= 1
            new.append(site)
    new.reverse()
    return new


def site_line(tree: Tree, site: Site) -> str:
    """A site as the report shows it: file:line: code  [kind in function]."""
    path = shown(os.path.join(tree.root, site.file))
    return f"{path}:{site.line}: {site.code}  [{site.kind} in {site.function}]"


def print_sites(tree: Tree, found: Scan) -> None:
    """Print every site, then how many there are of each kind (--list)."""
    for site in found.sites:
        print(site_line(tree, site))
    counts = [f"{found.files} files", f"{found.parsed} parsed"]
    for kind, number in Counter(site.kind for site in found.sites).most_common():
        counts.append(f"{kind} {number}")
    total = f"{len(found.sites)} ServerArgs writer sites"
    print(f"{total} in {tree.about} ({', '.join(counts)})")


def compare(
    tree: Tree, sites: list[Site], baseline: Baseline, path: str, argv: list[str]
) -> int:
    """Print the verdict and the new sites; 0 if the count is the baseline's."""
    count = len(sites)
    before = len(baseline.keys)
    where = f"ServerArgs writer sites in {tree.about}"
    if count == before:
        print(f"writer ratchet: OK: {count} {where}, as in {baseline.source}")
    else:
        change = "grew" if count > before else "shrank"
        print(
            f"writer ratchet: FAILED: {where} {change} from {before} to {count} "
            f"({baseline.source})"
        )
    new = new_sites(sites, baseline.keys)
    if new:
        print("New sites (give the component its own copy, or pass the value):")
    for site in new:
        print(f"  {site_line(tree, site)}")
    if count == before:
        return 0
    update = shlex.join([shown(sys.executable), shown(SCRIPT_PATH), *argv, "--update"])
    print(f"To record the reviewed count: {update}, and commit {shown(path)}")
    return 1


def check(args: Namespace, argv: list[str]) -> int:
    """Do what the command line asks; the exit status."""
    tree = resolve_tree(args.root)
    found = scan(tree.root)
    if args.list:
        print_sites(tree, found)
        return 0
    path = args.baseline or DEFAULT_BASELINE
    if args.update:
        write_baseline(path, tree.about, found.sites)
        print(
            f"writer ratchet: {shown(path)} records {len(found.sites)} sites; commit it"
        )
        return 0
    if args.baseline or os.path.exists(path) or not tree.in_checkout:
        baseline = Baseline(read_baseline(path), shown(path))
    else:
        baseline = sites_at_ratchet_commit(tree, found.sites)
    return compare(tree, found.sites, baseline, path, argv)


def main() -> int:
    """Run the ratchet from the command line; the exit status."""
    parser = ArgumentParser(
        description=__doc__, formatter_class=RawDescriptionHelpFormatter
    )
    parser.add_argument("--root", help="the sglang package directory to scan")
    parser.add_argument("--baseline", help="the baseline file")
    parser.add_argument("--list", action="store_true", help="print every site")
    parser.add_argument("--update", action="store_true", help="write the baseline")
    argv = sys.argv[1:]
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")  # the parser's, about the files scanned
    try:
        return check(args, argv)
    except BadInput as error:
        print(f"writer ratchet: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
