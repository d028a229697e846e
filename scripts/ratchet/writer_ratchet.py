#!/usr/bin/env python3
"""Find the writes onto a ServerArgs on the speculative draft side.

The draft side is srt/speculative/, DRAFT_SIDE_FUNCTIONS and the Scheduler
method that builds the draft worker (DRAFT_BUILDERS), with the defs inside
them; test/registered/unit/test_server_args_write_sites_ratchet.py pins
its writes. A write is R.override(...), R.field = ... (also in a tuple),
R.field += ..., del R.field or setattr(R, ...), where R is a name or attribute
server_args or *_server_args (self.server_args, draft_server_args), or a name
bound to one earlier in the same function (cfg = self.server_args). Files are
parsed with ast, so comments, strings and layout never count.

    python3 scripts/ratchet/writer_ratchet.py [PACKAGE]

lists them, in PACKAGE or else this checkout's python/sglang.
"""

import ast
import os
import re
import sys
from typing import NamedTuple

DRAFT_SIDE_FOLDER = "srt/speculative/"
DRAFT_SIDE_FUNCTIONS = {
    "srt/managers/scheduler.py": ("Scheduler.init_all_attention_backends",),
    "srt/server_args.py": ("draft_server_args_copy",),
}
# The Scheduler method that builds the draft worker is on the draft side too:
# the first of these that the release's scheduler.py defines
# (maybe_init_draft_worker from v0.5.8, init_model_worker on v0.5.7,
# __init__ on v0.5.6.x).
SCHEDULER_FILE = "srt/managers/scheduler.py"
DRAFT_BUILDERS = (
    "Scheduler.maybe_init_draft_worker",
    "Scheduler.init_model_worker",
    "Scheduler.__init__",
)
SERVER_ARGS_NAME = re.compile(r"(\w+_)?server_args$")
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


class Site(NamedTuple):
    """One write onto a ServerArgs."""

    file: str  # relative to the package directory
    function: str  # Class.method, function.inner, or <module>
    kind: str  # override, assign or setattr
    line: int
    write: str  # the write less its values: "server_args.port ="
    code: str  # the statement, as ast.unparse writes it on one line


def site_key(site):
    """What makes two sites the same: a moved line or a new value does not."""
    return (site.file, site.function, site.write)


def is_server_args(node, aliases):
    """Whether an expression is a ServerArgs: an R of the module docstring."""
    if isinstance(node, ast.Name):
        return bool(SERVER_ARGS_NAME.match(node.id)) or node.id in aliases
    if isinstance(node, ast.Attribute):
        return bool(SERVER_ARGS_NAME.match(node.attr))
    return False


def own_nodes(scope):
    """The nodes of a scope in source order, and the defs and classes in it
    but not their code, which is a scope of its own."""
    for child in ast.iter_child_nodes(scope):
        yield child
        if not isinstance(child, SCOPES):
            yield from own_nodes(child)


def aliases_in(nodes):
    """The names bound to a ServerArgs in a scope: cfg = self.server_args."""
    aliases = set()
    for node in nodes:
        if isinstance(node, ast.Assign) and is_server_args(node.value, aliases):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    aliases.add(target.id)
    return aliases


def call_without_values(call, aliases, shown):
    """A write call less its values: R.override('source', port=...), with
    the first `shown` positional arguments if each is a constant or an R."""
    parts = []
    for position, argument in enumerate(call.args):
        if position < shown and (
            isinstance(argument, ast.Constant) or is_server_args(argument, aliases)
        ):
            parts.append(ast.unparse(argument))
        else:
            parts.append("...")
    names = [keyword.arg for keyword in call.keywords if keyword.arg is not None]
    parts += [f"{name}=..." for name in sorted(names)]
    for keyword in call.keywords:
        if keyword.arg is None and isinstance(keyword.value, ast.Name):
            parts.append(f"**{keyword.value.id}")
        elif keyword.arg is None:
            parts.append("**...")
    return f"{ast.unparse(call.func)}({', '.join(parts)})"


def attributes_set_by(target):
    """The attributes an assignment target sets: sa.a, (sa.b, sa.c) = ..."""
    if isinstance(target, (ast.Tuple, ast.List)):
        found = []
        for element in target.elts:
            found += attributes_set_by(element)
        return found
    if isinstance(target, ast.Attribute):
        return [target]
    return []


def writes_of(node, aliases):
    """The (kind, write) pairs of one node: none, or one per field it sets."""
    if isinstance(node, ast.Call):
        function = node.func
        if (
            isinstance(function, ast.Attribute)
            and function.attr == "override"
            and is_server_args(function.value, aliases)
        ):
            return [("override", call_without_values(node, aliases, 1))]
        if (
            isinstance(function, ast.Name)
            and function.id == "setattr"
            and node.args
            and is_server_args(node.args[0], aliases)
        ):
            return [("setattr", call_without_values(node, aliases, 2))]
        return []
    if isinstance(node, ast.Assign):
        targets, form = node.targets, "{} ="
    elif isinstance(node, ast.AugAssign):
        targets, form = [node.target], "{} ="
    elif isinstance(node, ast.Delete):
        targets, form = node.targets, "del {}"
    else:
        return []
    writes = []
    for target in targets:
        for attribute in attributes_set_by(target):
            if is_server_args(attribute.value, aliases):
                field = f"{ast.unparse(attribute.value)}.{attribute.attr}"
                writes.append(("assign", form.format(field)))
    return writes


def sites_in_scope(scope, qualname, file):
    """The sites of a module, class or function, and of the scopes in it."""
    nodes = list(own_nodes(scope))
    aliases = aliases_in(nodes)
    function = ".".join(qualname) or "<module>"
    sites = []
    for node in nodes:
        if isinstance(node, SCOPES):
            inner = [*qualname, node.name]
            sites += sites_in_scope(node, inner, file)
        for kind, write in writes_of(node, aliases):
            code = ast.unparse(node)
            sites.append(Site(file, function, kind, node.lineno, write, code))
    return sites


def draft_builder(tree):
    """The first of DRAFT_BUILDERS that a parsed scheduler.py defines."""
    methods = {
        f"{scope.name}.{node.name}"
        for scope in tree.body
        if isinstance(scope, ast.ClassDef)
        for node in scope.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    return next((name for name in DRAFT_BUILDERS if name in methods), None)


def draft_side_functions(file, tree):
    """The functions of a parsed file that are on the draft side."""
    functions = list(DRAFT_SIDE_FUNCTIONS.get(file, ()))
    if file == SCHEDULER_FILE and draft_builder(tree) is not None:
        functions.append(draft_builder(tree))
    return functions


def on_draft_side(site, functions):
    """Whether a site is in the speculative folder or in one of functions."""
    if site.file.startswith(DRAFT_SIDE_FOLDER):
        return True
    for function in functions:
        if site.function == function or site.function.startswith(function + "."):
            return True
    return False


def draft_side_sites(root):
    """The writes onto a ServerArgs on the draft side of the package root."""
    files = [f for f in DRAFT_SIDE_FUNCTIONS if os.path.isfile(os.path.join(root, f))]
    for folder, _, names in os.walk(os.path.join(root, DRAFT_SIDE_FOLDER)):
        relative = os.path.relpath(folder, root).replace(os.sep, "/")
        files += [f"{relative}/{name}" for name in names if name.endswith(".py")]
    sites = []
    for file in files:
        path = os.path.join(root, file)
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), filename=path)
        functions = draft_side_functions(file, tree)
        found = sites_in_scope(tree, [], file)
        sites += [site for site in found if on_draft_side(site, functions)]
    return sorted(sites, key=lambda site: (site.file, site.line, site.write))


def site_line(root, site):
    """A site as a report shows it: file:line: code  [kind in function]."""
    path = os.path.join(root, site.file)
    if not os.path.relpath(path).startswith(".."):
        path = os.path.relpath(path)
    return f"{path}:{site.line}: {site.code}  [{site.kind} in {site.function}]"


def main():
    checkout = os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    )
    root = os.path.join(checkout, "python", "sglang")
    if len(sys.argv) > 1:
        root = sys.argv[1]
    sites = draft_side_sites(root)
    for site in sites:
        print(site_line(root, site))
    print(f"{len(sites)} writes onto a ServerArgs on the draft side of {root}")


if __name__ == "__main__":
    main()
