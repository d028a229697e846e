#!/usr/bin/env python3
"""Writer ratchet: fail when the count of writes onto a ServerArgs changes.

In sglang 0.5.16 the scheduler, the target worker and get_server_args() share
one ServerArgs, so a write onto it reaches all three. Each .py file naming
server_args, ServerArgs or override (but in srt/arg_groups/, multimodal_gen/)
is parsed with ast: comments, strings and layout never count. A site is
R.override(...) (args.override, sa.override too), R.x = ..., R.x += ..., del
R.x (in a tuple, or as a for or with target too), setattr(R, ...),
object.__setattr__(R, ...) or declare_load_time_override(...). R is a name or
attribute server_args or *_server_args; a call of ServerArgs(...),
ServerArgs.*(...), *server_args(), *server_args_copy(), or copy.copy,
copy.deepcopy or dataclasses.replace of an R; a name annotated ServerArgs or
bound to an R in its function or an enclosing one (cfg = self.server_args);
never self. A site is its file, function and write less its values: a moved
line or an edited value is no new site.

Tree: --root, else python/sglang of the checkout holding this script, else the
installed sglang. Baseline: --baseline, else baseline.txt here, else the tree
at the git commit that added this script (no step after git am); --update
writes it. Exit: 0 the count is the baseline's, 1 it changed (new sites shown
as file:line: code  [kind in function]), 2 bad input.
"""

import ast
import importlib.util
import operator
import os
import re
import shlex
import subprocess
import sys
import warnings
from argparse import ArgumentParser, RawDescriptionHelpFormatter
from collections import Counter, namedtuple

SELF = os.path.realpath(__file__)  # CHECKOUT/scripts/ratchet/writer_ratchet.py
CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(SELF)))
SCRIPT = os.path.relpath(SELF, CHECKOUT)
NAMED = re.compile(r"(\w*_)?server_args$")
CALLED = re.compile(r"(?!set_|_set_|override_)\w*server_args(_copy)?$")
TYPED = re.compile(r"\bServerArgs\b")
HEADER = re.compile(r"# writer_ratchet\.py baseline: (\d+) sites in ")
SKIP = re.compile(r"srt/arg_groups/|multimodal_gen/|(.*/)?(__pycache__|\.[^/]*)/")
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
ASSIGNS = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)
LOOPS = (ast.For, ast.AsyncFor, ast.withitem)  # their targets are shown
KEEP = {*SCOPES, *ASSIGNS, *LOOPS, ast.Call, ast.NamedExpr}  # what a walk keeps
STOP = {*SCOPES, ast.Load, ast.Store, ast.Del, ast.Name, ast.Constant}  # not entered
SETTERS = {("setattr", None), ("__setattr__", "object")}
Site = namedtuple("Site", "file function kind line write code")
key = operator.itemgetter(0, 1, 4)  # file, function, write
CLI = ArgumentParser(description=__doc__, formatter_class=RawDescriptionHelpFormatter)
CLI.add_argument("--root", help="the sglang package directory to scan")
CLI.add_argument("--baseline", help="the baseline file")
CLI.add_argument("--list", action="store_true", help="print every site")
CLI.add_argument("--update", action="store_true", help="write the baseline")


def fail(message):  # bad input: one line, nothing written
    print(f"writer ratchet: error: {message}", file=sys.stderr)
    sys.exit(2)


def _name(node):
    return node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)


def is_sa(node, aliases):
    if isinstance(node, (ast.Name, ast.Attribute)):
        return bool(NAMED.match(_name(node))) or getattr(node, "id", 0) in aliases
    if not isinstance(node, ast.Call) or (name := _name(node.func)) is None:
        return False
    if name in ("copy", "deepcopy", "replace"):
        return bool(node.args) and is_sa(node.args[0], aliases)
    owner = _name(getattr(node.func, "value", None))
    return "ServerArgs" in (name, owner) or bool(CALLED.match(name))


def _shape(call, aliases, keep):
    """A write call less its values: keyword names, dict keys, constants."""
    parts = ["..."] * len(call.args)
    for i, arg in enumerate(call.args[:keep]):
        if isinstance(arg, ast.Dict) and None not in arg.keys:
            parts[i] = "{" + ", ".join(sorted(map(ast.unparse, arg.keys))) + "}"
        elif isinstance(arg, ast.Constant) or is_sa(arg, aliases):
            parts[i] = ast.unparse(arg)
    parts += sorted(f"{kw.arg}=..." for kw in call.keywords if kw.arg)
    parts += [f"**{_name(kw.value) or '...'}" for kw in call.keywords if not kw.arg]
    return f"{ast.unparse(call.func)}({', '.join(parts)})"


def _writes(node, aliases):
    """(node to show, kind, write less its values) of each write of ``node``."""
    if isinstance(node, ast.Call):
        name, recv = _name(node.func), getattr(node.func, "value", None)
        short = isinstance(recv, ast.Name) and recv.id in ("args", "sa")
        first = (node.args or [None])[0]
        if name == "declare_load_time_override":
            yield node, "declare", _shape(node, aliases, 2)
        elif name == "override" and recv and (short or is_sa(recv, aliases)):
            yield node, "override", _shape(node, aliases, 1)
        elif (name, _name(recv)) in SETTERS and is_sa(first, aliases):
            yield node, "setattr", _shape(node, aliases, 2)
    if not isinstance(node, ASSIGNS + LOOPS) or getattr(node, "value", 1) is None:
        return
    target = getattr(node, "target", getattr(node, "optional_vars", None))
    targets = [*getattr(node, "targets", []), target]
    while targets:
        target = targets.pop()
        if isinstance(target, (ast.Tuple, ast.List)):
            targets += target.elts
        elif isinstance(target, ast.Starred):
            targets.append(target.value)
        elif isinstance(target, ast.Attribute) and is_sa(target.value, aliases):
            field = f"{ast.unparse(target.value)}.{target.attr}"
            write = f"del {field}" if isinstance(node, ast.Delete) else f"{field} ="
            yield target if isinstance(node, LOOPS) else node, "assign", write


def _scope(scope, qual, outer):
    """(node, function, kind, write) of each write in a scope and its inner ones."""
    nodes, stack = [], list(ast.iter_child_nodes(scope))
    while stack:  # the scope's nodes, less the bodies of inner scopes
        if type(node := stack.pop()) in KEEP:
            nodes.append(node)
        if type(node) not in STOP:
            stack += ast.iter_child_nodes(node)
    a = getattr(scope, "args", None)
    params = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg] if a else []
    binds = [(p.arg, p.annotation, None) for p in params if p]
    for node in nodes:  # name = R, name: "ServerArgs" = ..., (name := R)
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)):
            ann, value = getattr(node, "annotation", None), node.value
            names = getattr(node, "targets", None) or [node.target]
            binds += [(t.id, ann, value) for t in names if isinstance(t, ast.Name)]
    typed = {n for n, ann, _ in binds if ann and TYPED.search(ast.unparse(ann))}
    aliases = set(outer).difference(p.arg for p in params if p) | typed
    while more := {n for n, _, value in binds if is_sa(value, aliases)} - aliases:
        aliases |= more
    aliases.discard("self")
    inner = outer if isinstance(scope, ast.ClassDef) else aliases  # not methods'
    for node in nodes:
        if isinstance(node, SCOPES):
            yield from _scope(node, qual + (node.name,), inner)
        for at, kind, write in _writes(node, aliases):
            yield at, ".".join(qual) or "<module>", kind, write


def file_sites(rel, data, shown_as):
    """The sites of one file's bytes, or None when it names no ServerArgs."""
    if not any(word in data for word in (b"server_args", b"ServerArgs", b"override")):
        return None
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError) as exc:
        where = f"{shown_as}:{exc.lineno}" if getattr(exc, "lineno", 0) else shown_as
        fail(f"{where}: cannot parse ({getattr(exc, 'msg', None) or exc}); fix it")
    lines, sites = data.splitlines(), []
    for node, function, kind, write in _scope(tree, (), set()):
        *head, last = lines[node.lineno - 1 : node.end_lineno]  # the node's source
        code = b"\n".join([*head, last[: node.end_col_offset]])[node.col_offset :]
        code = " ".join(code.decode("utf-8", "replace").replace("\\\n", " ").split())
        code = re.sub(r",? ([)\]}])", r"\1", re.sub(r"([(\[{]) ", r"\1", code))
        code = code if len(code) <= 160 else code[:157] + "..."
        sites.append(Site(rel, function, kind, node.lineno, write, code))
    return sites


def scan(root):
    """(sites, files scanned, files parsed) of the package directory ``root``."""
    files, sites, parsed = [], [], 0
    for top, _, names in os.walk(root):
        rel = (os.path.relpath(top, root) + "/").removeprefix("./")
        files += [rel + n for n in names if n.endswith(".py") and not SKIP.match(rel)]
    if not files:
        fail(f"no Python files in {shown(root)}; pass the sglang package")
    for rel in files:
        with open(os.path.join(root, rel), "rb") as fh:
            found = file_sites(rel, fh.read(), shown(os.path.join(root, rel)))
        sites, parsed = sites + (found or []), parsed + (found is not None)
    return sorted(sites, key=lambda s: (s.file, s.line, s.write)), len(files), parsed


def shown(path):
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def resolve_tree(arg):  # (package directory, what it is, whether it is the checkout's)
    mine, what = os.path.join(CHECKOUT, "python", "sglang"), ""
    if arg is None and not os.path.isdir(mine):
        spec = importlib.util.find_spec("sglang")
        if not (spec and spec.origin):
            fail(f"no {shown(mine)} and no sglang installed; pass --root")
        arg, what = os.path.dirname(spec.origin), " (the installed sglang)"
    root = os.path.realpath(mine if arg is None else arg)
    if not os.path.isdir(root):
        fail(f"--root {arg} is not a directory; pass the sglang package directory")
    what = f" (the checkout {shown(CHECKOUT)})" if root == mine else what
    return root, shown(root) + what, root == mine


def _git(cwd, *args):
    proc = subprocess.run(["git", "-C", cwd, *args], capture_output=True)
    return os.fsdecode(proc.stdout) if proc.returncode == 0 else None


def anchor_sites(root, sites, none):
    """(sites, what) of the tree at the git commit that added this script."""
    log = ("log", "-1", "--diff-filter=A", "--format=%H %h %D", "--", SELF)
    if not (found := _git(root, *log)):
        fail(f"{none}: no git commit added {SCRIPT}; record one with --update")
    commit, short = found.split()[:2]
    if "grafted" in found:  # a shallow clone's first commit
        what = f"the commit that added {SCRIPT}: git fetch --unshallow"
        fail(f"{shown(CHECKOUT)} is a shallow clone cut at {short}, {what}")
    tracked, changed = (  # the package's files then, and those changed since
        set((_git(root, *cmd, "-z", "--name-only", commit) or "").split("\0")[:-1])
        for cmd in (("ls-tree", "-r"), ("diff", "--relative", "--no-renames"))
    )
    base = [site for site in sites if site.file in tracked - changed]
    for rel in sorted(tracked & changed):
        if rel.endswith(".py") and not SKIP.match(rel):
            data = os.fsencode(_git(root, "show", f"{commit}:./{rel}") or "")
            base += file_sites(rel, data, f"{rel} at {short}") or []
    return base, f"{short}, the commit that added {SCRIPT}"


def read_baseline(path):
    try:
        with open(path, encoding="utf-8") as fh:
            head, *rows = fh.read().splitlines() or [""]
    except (OSError, ValueError) as exc:  # missing, or not UTF-8
        fail(f"cannot read {shown(path)} ({exc}); record it with --update")
    rows, count = [row.split("\t") for row in rows], HEADER.match(head)
    if not count or int(count[1]) != len(rows) or {len(r) for r in rows} - {5}:
        fail(f"baseline {shown(path)} is corrupt; redo it with --update")
    return [Site(*row, row[4]) for row in rows]


def write_baseline(path, about, sites):
    for target in filter(os.path.exists, (path, os.path.dirname(path) or ".")):
        if not (os.stat(target).st_mode & 0o222 and os.access(target, os.W_OK)):
            fail(f"{shown(target)} is read-only; chmod u+w it")
    text = f"# writer_ratchet.py baseline: {len(sites)} sites in {about}; "
    text += "file, function, kind, line (not compared), write\n"
    text += "".join("\t".join(map(str, site[:5])) + "\n" for site in sites)
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        fail(f"cannot write {shown(path)} ({exc.strerror}); pass --baseline")


def check(args, argv):
    root, about, mine = resolve_tree(args.root)
    sites, files, parsed = scan(root)
    where = f"writer sites in {about}"

    def line(s):
        path = shown(os.path.join(root, s.file))
        return f"{path}:{s.line}: {s.code}  [{s.kind} in {s.function}]"

    if args.list:
        kinds = Counter(site.kind for site in sites).most_common()
        kinds = [f"{files} files", f"{parsed} parsed"] + [f"{k} {n}" for k, n in kinds]
        print("".join(line(site) + "\n" for site in sites), end="")
        print(f"{len(sites)} ServerArgs {where} ({', '.join(kinds)})")
        return 0
    path = args.baseline or os.path.join(os.path.dirname(SELF), "baseline.txt")
    if args.update:
        write_baseline(path, about, sites)
        print(f"writer ratchet: {shown(path)} records {len(sites)} sites; commit it")
        return 0
    if args.baseline or os.path.exists(path) or not mine:
        base, whence = read_baseline(path), shown(path)
    else:
        base, whence = anchor_sites(root, sites, f"no baseline for {about}")
    extra = Counter(map(key, sites)) - Counter(map(key, base))  # the last are new
    new = [s for s in sites[::-1] if extra[key(s)] > 0 and not extra.subtract([key(s)])]
    count, before = len(sites), len(base)
    change = f"{'grew' if count > before else 'shrank'} from {before} to {count}"
    verdict = f"OK: {count} ServerArgs {where}, as in {whence}"
    if count != before:
        verdict = f"FAILED: ServerArgs {where} {change} ({whence})"
    print(f"writer ratchet: {verdict}")
    if new:
        hint = "New sites (give the component its own copy, or pass the value):"
        print(hint, *map(line, new[::-1]), sep="\n  ")
    if count != before:
        cmd = shlex.join([shown(sys.executable), shown(SELF), *argv, "--update"])
        print(f"To record the reviewed count: {cmd}, and commit {shown(path)}")
    return 0 if count == before else 1


if __name__ == "__main__":
    warnings.simplefilter("ignore")  # the parser's, of the files scanned
    sys.exit(check(CLI.parse_args(), sys.argv[1:]))
