#!/usr/bin/env python3
"""Find the writes onto a ServerArgs on the speculative draft side, which
test/registered/unit/test_server_args_write_sites_ratchet.py pins.

The draft side is srt/speculative/ and the functions that build the draft. A
write is R.field as the target of =, += or del, R.override(...) or
setattr(R, ...), where R is server_args, a name or attribute ending in
_server_args, or a name bound to one earlier in the same function.

Usage: python3 scripts/ratchet/writer_ratchet.py [PACKAGE, default python/sglang]
"""

import ast
import glob
import os
import re
import sys
from collections import Counter
from typing import NamedTuple

SPECULATIVE = "srt/speculative/"
DRAFT_SIDE = {
    "srt/managers/scheduler.py": ["Scheduler.init_all_attention_backends"],
    "srt/server_args.py": ["draft_server_args_copy"],
}
# The Scheduler method that builds the draft worker: the first of these that
# the release has (v0.5.8 on, v0.5.7, v0.5.6).
DRAFT_BUILDERS = ["maybe_init_draft_worker", "init_model_worker", "__init__"]
SERVER_ARGS = re.compile(r"(\w+_)?server_args$")


class Site(NamedTuple):
    file: str  # under the package
    line: int
    function: str  # Class.method, or <module>
    write: str  # the write less its values: "server_args.port ="

    def key(self):
        """What the pin names: a moved line or an edited value is the same."""
        return self.function, self.write


class WriteFinder(ast.NodeVisitor):
    """The writes onto a ServerArgs in one module, and the defs it has."""

    def __init__(self, file):
        self.file = file
        self.scope = []
        self.defs = set()
        self.aliases = set()
        self.sites = []

    def visit_FunctionDef(self, node):
        outer, self.aliases = self.aliases, set()
        self.scope.append(node.name)
        self.defs.add(".".join(self.scope))
        self.generic_visit(node)
        self.scope.pop()
        self.aliases = outer

    visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

    def is_server_args(self, node):
        if isinstance(node, ast.Name):
            return bool(SERVER_ARGS.match(node.id)) or node.id in self.aliases
        return isinstance(node, ast.Attribute) and bool(SERVER_ARGS.match(node.attr))

    def add(self, node, write):
        function = ".".join(self.scope) or "<module>"
        self.sites.append(Site(self.file, node.lineno, function, write))

    def visit_Assign(self, node):
        self.generic_visit(node)
        if self.is_server_args(node.value):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.aliases.add(target.id)

    def visit_Attribute(self, node):
        # R.field stored or deleted: by =, +=, del, in a tuple, by for or with.
        if not isinstance(node.ctx, ast.Load) and self.is_server_args(node.value):
            field = f"{ast.unparse(node.value)}.{node.attr}"
            deleted = isinstance(node.ctx, ast.Del)
            self.add(node, f"del {field}" if deleted else f"{field} =")
        self.generic_visit(node)

    def visit_Call(self, node):
        function, args = node.func, node.args
        if isinstance(function, ast.Name) and function.id == "setattr":
            if len(args) > 1 and self.is_server_args(args[0]):
                field = args[1]
                field = repr(field.value) if isinstance(field, ast.Constant) else "..."
                self.add(node, f"setattr({ast.unparse(args[0])}, {field})")
        elif isinstance(function, ast.Attribute) and function.attr == "override":
            if self.is_server_args(function.value):
                # A write per field: server_args.override(context_length).
                fields = [
                    k.arg or f"**{getattr(k.value, 'id', '...')}" for k in node.keywords
                ]
                for field in fields or ["..."]:
                    self.add(node, f"{ast.unparse(function.value)}.override({field})")
        self.generic_visit(node)


def draft_side_sites(root):
    """The writes onto a ServerArgs on the draft side of the package root."""
    files = glob.glob(f"{SPECULATIVE}**/*.py", root_dir=root, recursive=True)
    files += [file for file in DRAFT_SIDE if os.path.isfile(os.path.join(root, file))]
    sites = []
    for file in files:
        finder = WriteFinder(file)
        with open(os.path.join(root, file), encoding="utf-8") as fh:
            finder.visit(ast.parse(fh.read(), filename=fh.name))
        builders = [f"Scheduler.{name}" for name in DRAFT_BUILDERS]
        builders = [name for name in builders if name in finder.defs]
        functions = DRAFT_SIDE.get(file, []) + builders[:1]
        for site in finder.sites:
            inside = [f for f in functions if f"{site.function}.".startswith(f"{f}.")]
            if file.startswith(SPECULATIVE) or inside:
                sites.append(site)
    return sorted(sites)


def describe(root, site):
    path = os.path.join(root, site.file)
    return f"  {path}:{site.line}: {site.function}: {site.write}"


def check(root, baseline):
    """How the draft side's writes in the package root differ from baseline,
    {function: [write, ...]}; "" when they match it."""
    sites = draft_side_sites(root)
    found = Counter(site.key() for site in sites)
    pinned = Counter((f, write) for f, writes in baseline.items() for write in writes)
    new, gone = found - pinned, pinned - found
    report = []
    if new:
        report.append("new writes onto a ServerArgs on the speculative draft side:")
        report += [describe(root, site) for site in sites if site.key() in new]
        report.append(
            "Build the draft from its own copy (draft_server_args_copy) or hand it "
            "the value. A write reviewed and meant goes in _BASELINE[function]."
        )
    if gone:
        report.append(
            "draft-side writes onto a ServerArgs shrank; remove them from "
            "_BASELINE[function] to lock in the progress:"
        )
        report += [
            f"  {function}: {write}" for function, write in sorted(gone.elements())
        ]
    return "\n".join(report)


def main():
    checkout = os.path.abspath(os.path.join(__file__, "..", "..", ".."))
    root = sys.argv[1] if len(sys.argv) > 1 else f"{checkout}/python/sglang"
    if not os.path.isdir(os.path.join(root, SPECULATIVE)):
        sys.exit(f"writer_ratchet: no {SPECULATIVE} in {root}; give an sglang package")
    sites = draft_side_sites(root)
    print("\n".join(describe(root, site) for site in sites))
    print(f"{len(sites)} writes onto a ServerArgs on the draft side of {root}")


if __name__ == "__main__":
    main()
