#!/usr/bin/env python3
"""Writer ratchet: fail when the places that write onto a ServerArgs grow.

In 0.5.16 the scheduler, the target worker and get_server_args() share one
ServerArgs, so a write onto it can leak, as the speculative drafts' did. Each
.py naming server_args, ServerArgs or override (NFKC, as Python reads names),
but srt/arg_groups/ and multimodal_gen/, is parsed with ast, so comments,
strings and layout never count. Sites: R.override(...) (and args., sa.),
R.x = / += / del (also in a tuple, for, with), setattr(R, ...),
object.__setattr__(R, ...), R.__setattr__(...), declare_load_time_override().
R: a name or attribute [*_]server_args; a call of ServerArgs[.*], of
*server_args[_copy] (not set_*, override_*), of copy/deepcopy/replace of an
R; a name bound to an R in its scope or an outer one (cfg = R, for sa in (R,
R), sa := R, an argument annotated ServerArgs); not self. Key: file,
function, and the write less its values.

Tree: --root, else python/sglang of the checkout around the working
directory, else the installed sglang. Baseline: --baseline, else the tree's
scripts/ratchet/baseline.txt (this script's for an installed sglang) if any,
else the tree at the git commit that added this script, so a fork needs no
step after git am. --update writes the baseline file (commit it, e.g. to
accept a reviewed write). Exit: 0 the count is the baseline's; 1 it changed
(new sites shown as file:line: code  [kind in function]); 2 bad input (one
line on what to do; nothing written).
"""

import argparse
import ast
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import unicodedata
import warnings
from collections import Counter, namedtuple

RULES = 2
SCRIPT = "scripts/ratchet/writer_ratchet.py"
HERE = os.path.dirname(os.path.abspath(__file__))
STRONG = re.compile(r"(\w*_)?server_args$")  # server_args, draft_server_args
HEADER = re.compile(r"# writer_ratchet\.py baseline, rules (\d+): (\d+) sites")
Site = namedtuple("Site", "file function kind write line code")
Tree = namedtuple("Tree", "root checkout about")
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
TARGETS = {ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete, ast.For,
           ast.AsyncFor, ast.comprehension, ast.withitem}  # fmt: skip
KEEP = TARGETS | set(SCOPES) | {ast.Call, ast.NamedExpr}
LEAVES = {ast.Name, ast.Constant, ast.Load, ast.Store, str, type(None)}


class BadInput(Exception):
    """Input the ratchet cannot work with; the message is one line."""


def key(site):
    return (site.file, site.function, site.write)


# -- what is a ServerArgs, what is a write ---------------------------------


def _name(node):
    return node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)


def _sa_func(name):
    if name.startswith(("set_", "_set_", "override_")):
        return False
    return name == "ServerArgs" or name.endswith(("server_args", "server_args_copy"))


def is_sa(node, aliases):
    """Whether the expression ``node`` denotes a ServerArgs."""
    if isinstance(node, (ast.Name, ast.Attribute)):
        return bool(STRONG.match(_name(node))) or getattr(node, "id", 0) in aliases
    if isinstance(node, ast.NamedExpr):
        return is_sa(node.value, aliases)
    if isinstance(node, ast.BoolOp):
        return any(is_sa(value, aliases) for value in node.values)
    if isinstance(node, ast.IfExp):
        return is_sa(node.body, aliases) or is_sa(node.orelse, aliases)
    if not isinstance(node, ast.Call) or _name(node.func) is None:
        return False
    name, owner = _name(node.func), _name(getattr(node.func, "value", None))
    if owner == "ServerArgs" or _sa_func(name):
        return True
    if name not in ("copy", "deepcopy", "replace") or not node.args:
        return False
    return owner in (None, "copy", "dataclasses") and is_sa(node.args[0], aliases)


def _typed(annotation):
    for node in ast.walk(annotation) if annotation else ():
        text = str(node.value) if type(node) is ast.Constant else ""
        if _name(node) == "ServerArgs" or re.search(r"\bServerArgs\b", text):
            return True
    return False


def _own_nodes(stmts):
    """The writes, calls and bindings of one scope, and its inner functions
    and classes, whose decorators, defaults and bases run in it."""
    out, stack = [], list(stmts)
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind in KEEP:
            out.append(node)
        if kind is ast.ClassDef:
            stack += node.decorator_list + node.bases
            stack += [keyword.value for keyword in node.keywords]
        elif kind in SCOPES:
            stack += node.decorator_list + node.args.defaults + node.args.kw_defaults
        elif kind not in LEAVES:
            for field in node._fields:
                value = getattr(node, field, None)
                if type(value) is list:
                    stack += value
                elif isinstance(value, ast.AST):
                    stack.append(value)
    return out


def _bind(nodes, outer, args):
    """The names a scope binds to a ServerArgs, with the outer scope's."""
    aliases = set(outer)
    if args is not None:
        params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
        params += [param for param in (args.vararg, args.kwarg) if param]
        aliases -= {param.arg for param in params}
        aliases |= {param.arg for param in params if _typed(param.annotation)}
    bindings = []  # (name, values): bound to a ServerArgs if every value is one
    for node in nodes:
        kind = type(node)
        if kind is ast.Assign:
            names = [t.id for t in node.targets if type(t) is ast.Name]
            bindings += [(name, [node.value]) for name in names]
        elif kind is ast.AnnAssign and type(node.target) is ast.Name:
            if _typed(node.annotation):
                aliases.add(node.target.id)
            elif node.value is not None:
                bindings.append((node.target.id, [node.value]))
        elif kind is ast.NamedExpr:
            bindings.append((node.target.id, [node.value]))
        elif kind in (ast.For, ast.AsyncFor) and type(node.target) is ast.Name:
            if isinstance(node.iter, (ast.Tuple, ast.List)) and node.iter.elts:
                bindings.append((node.target.id, node.iter.elts))
            elif type(node.iter) is ast.Call and _sa_func(_name(node.iter.func) or ""):
                bindings.append((node.target.id, [node.iter]))
    while True:
        more = {n for n, vs in bindings if all(is_sa(v, aliases) for v in vs)}
        if more <= aliases:
            return aliases - {"self"}
        aliases |= more


def _shape(call, aliases, keep):
    """A write call less its values: keyword names and, of the first ``keep``
    arguments, receivers, constants and a dict's keys stay."""
    parts = ["..."] * len(call.args)
    for i, arg in enumerate(call.args[:keep]):
        if isinstance(arg, ast.Constant):
            parts[i] = repr(arg.value)
        elif isinstance(arg, ast.Dict) and None not in arg.keys:
            parts[i] = "{" + ", ".join(sorted(map(ast.unparse, arg.keys))) + "}"
        elif is_sa(arg, aliases):
            parts[i] = ast.unparse(arg)
    parts += sorted(f"{kw.arg}=..." for kw in call.keywords if kw.arg)
    parts += [f"**{_name(kw.value) or '...'}" for kw in call.keywords if not kw.arg]
    return f"{ast.unparse(call.func)}({', '.join(parts)})"


class Scanner:
    """The writer sites of one parsed file."""

    def __init__(self, rel, data):
        self.rel, self.lines, self.sites = rel, data.splitlines(), []

    def scope(self, stmts, qual, outer, args=None, is_class=False):
        nodes = _own_nodes(stmts)
        aliases = _bind(nodes, outer, args)
        inner = outer if is_class else aliases  # a class's names stay in it
        where = ".".join(qual) or "<module>"
        for node in nodes:
            if isinstance(node, ast.ClassDef):
                self.scope(node.body, qual + (node.name,), inner, is_class=True)
            elif isinstance(node, SCOPES):
                self.scope(node.body, qual + (node.name,), inner, node.args)
            elif type(node) is ast.Call:
                self.call(node, where, aliases)
            elif type(node) in TARGETS:
                self.assign(node, where, aliases)

    def call(self, call, where, aliases):
        name, args = _name(call.func), call.args
        recv = getattr(call.func, "value", None)
        if name == "declare_load_time_override":
            kind = "declare"
        elif name == "override" and recv is not None:
            short = isinstance(recv, ast.Name) and recv.id in ("args", "sa")
            kind = "override" if short or is_sa(recv, aliases) else None
        elif (name, _name(recv)) in (("setattr", None), ("__setattr__", "object")):
            kind = "setattr" if args and is_sa(args[0], aliases) else None
        else:
            ok = name == "__setattr__" and is_sa(recv, aliases)
            kind = "setattr" if ok else None
        if kind:  # show the field of setattr(R, "field", ...), what is declared
            keep = 2 if kind == "declare" or args and is_sa(args[0], aliases) else 1
            self.add(call, where, kind, _shape(call, aliases, keep))

    def assign(self, node, where, aliases):
        kind, op, at = type(node), "=", node
        targets = [getattr(node, "target", getattr(node, "optional_vars", None))]
        if kind in (ast.Assign, ast.Delete):
            targets, op = list(node.targets), "del" if kind is ast.Delete else "="
        elif kind is ast.AugAssign:
            op = ast.unparse(node)[len(ast.unparse(node.target)) :].split()[0]  # +=
        elif kind is ast.AnnAssign and node.value is None:
            return
        elif kind is not ast.AnnAssign:  # for, with and comprehension targets
            at = targets[0]
        while targets:
            target = targets.pop()
            if isinstance(target, (ast.Tuple, ast.List)):
                targets += target.elts
            elif isinstance(target, ast.Starred):
                targets.append(target.value)
            elif isinstance(target, ast.Attribute) and is_sa(target.value, aliases):
                field = f"{ast.unparse(target.value)}.{target.attr}"
                write = f"del {field}" if op == "del" else f"{field} {op}"
                self.add(at, where, "assign", write)

    def add(self, node, where, kind, write):
        first, last = node.lineno - 1, node.end_lineno - 1
        text = b"\n".join(self.lines[first : last + 1])
        end = len(text) - len(self.lines[last]) + node.end_col_offset
        code = text[node.col_offset : end].decode("utf-8", "replace")
        code = " ".join(code.replace("\\\n", " ").split())
        code = re.sub(r",? ([)\]}])", r"\1", re.sub(r"([(\[{]) ", r"\1", code))
        code = code if len(code) <= 160 else code[:157] + "..."
        self.sites.append(Site(self.rel, where, kind, write, node.lineno, code))


# -- trees ------------------------------------------------------------------


def wanted(rel):
    """Whether the ratchet scans the file ``rel`` of a package."""
    dirs = rel.split("/")[:-1]
    hidden = any(part == "__pycache__" or part.startswith(".") for part in dirs)
    skipped = rel.startswith(("srt/arg_groups/", "multimodal_gen/"))
    return rel.endswith(".py") and not skipped and not hidden


def file_sites(rel, data, shown_as):
    """The writer sites of one file (``shown_as`` names it in errors)."""
    words = ("server_args", "ServerArgs", "override")
    if not any(word.encode() in data for word in words):
        if data.isascii():
            return []
        text = unicodedata.normalize("NFKC", data.decode("utf-8", "replace"))
        if not any(word in text for word in words):
            return []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the parser's warnings are not ours
            tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        where = f":{exc.lineno}" if getattr(exc, "lineno", None) else ""
        raise BadInput(
            f"{shown_as}{where}: cannot parse ({getattr(exc, 'msg', None) or exc}); "
            "fix the file, or scan another tree with --root"
        ) from None
    scanner = Scanner(rel, data)
    scanner.scope(tree.body, (), set())
    return scanner.sites


def scan(root):
    """(sites, number of files) of the package directory ``root``."""
    files, sites = [], []
    for top, _, names in os.walk(root, onerror=_unreadable):
        prefix = os.path.relpath(top, root).replace(os.sep, "/") + "/"
        prefix = "" if prefix == "./" else prefix
        files += [prefix + name for name in names if wanted(prefix + name)]
    if not files:
        raise BadInput(
            f"no Python files in {shown(root)}; pass --root with the sglang package "
            "(site-packages/sglang, or a checkout's python/sglang)"
        )
    for rel in files:
        try:
            with open(os.path.join(root, rel), "rb") as fh:
                data = fh.read()
        except OSError as exc:
            _unreadable(exc)
        sites += file_sites(rel, data, shown(os.path.join(root, rel)))
    sites.sort(key=lambda site: (site.file, site.line, site.write))
    return sites, len(files)


def _unreadable(exc):
    raise BadInput(f"cannot read {exc.filename} ({exc.strerror}); check its mode")


def shown(path):
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def resolve_tree(arg):
    here = os.getcwd()
    while arg is None and not os.path.isfile(f"{here}/python/sglang/__init__.py"):
        if os.path.dirname(here) == here:  # in no checkout: the installed sglang
            spec = importlib.util.find_spec("sglang")
            places = list(spec.submodule_search_locations or []) if spec else []
            if not places:
                raise BadInput(
                    f"{os.getcwd()} is in no checkout with python/sglang, and "
                    f"{sys.executable} has no sglang; pass --root PATH"
                )
            root = os.path.realpath(places[0])
            return Tree(root, None, f"{shown(root)} (the installed sglang)")
        here = os.path.dirname(here)
    root = os.path.realpath(
        os.path.join(here, "python", "sglang") if arg is None else arg
    )
    if not os.path.isdir(root):
        what = "is not a directory" if os.path.exists(root) else "does not exist"
        raise BadInput(
            f"--root {arg} {what}; pass the sglang package (site-packages/sglang "
            "or python/sglang)"
        )
    for sub in ("python/sglang", "sglang"):
        if os.path.isfile(os.path.join(root, sub, "__init__.py")):
            root = os.path.join(root, sub)
            break
    checkout = os.path.dirname(os.path.dirname(root))
    if os.path.basename(os.path.dirname(root)) != "python":
        return Tree(root, None, shown(root))
    return Tree(root, checkout, f"{shown(root)} (the checkout {shown(checkout)})")


# -- baselines ----------------------------------------------------------------


def _git(top, *args):
    try:
        proc = subprocess.run(["git", "-C", top, *args], capture_output=True)
    except OSError:
        return None
    return proc.stdout if proc.returncode == 0 else None


def anchor_sites(tree, sites):
    """(sites, what) of the tree at the commit that added this script to its
    git checkout, or None."""
    top = _git(tree.checkout, "rev-parse", "--show-toplevel")
    if top is None:
        return None
    top = os.path.realpath(top.decode().strip())
    pkg = os.path.relpath(tree.root, top).replace(os.sep, "/")
    script = os.path.relpath(os.path.join(tree.checkout, SCRIPT), top)
    found = _git(top, "log", "-1", "--diff-filter=A", "--format=%H %h", "--", script)
    if not found:
        return None
    commit, short = found.decode().split()
    shallow = _git(top, "rev-parse", "--git-path", "shallow").decode().strip()
    shallow = os.path.join(top, shallow)  # the commits a shallow clone stops at
    if os.path.isfile(shallow) and commit in _read(shallow).split():
        raise BadInput(
            f"{shown(top)} is a shallow clone cut at {short}, the commit that added "
            f"{SCRIPT}: git fetch --unshallow, or pass --baseline"
        )
    tracked = _git(top, "ls-tree", "-r", "-z", "--name-only", commit, "--", pkg)
    changed = _git(top, "diff", "--no-renames", "--name-only", "-z", commit, "--", pkg)
    if tracked is None or changed is None:
        raise BadInput(f"git cannot list {pkg} at {short} in {shown(top)}; check it")
    tracked, changed = (
        {name.decode(errors="surrogateescape")[len(pkg) + 1 :] for name in names}
        for names in (tracked.split(b"\0")[:-1], changed.split(b"\0")[:-1])
    )
    same = tracked - changed  # their sites are today's
    base = [site for site in sites if site.file in same]
    for rel in sorted(tracked & changed):
        data = _git(top, "show", f"{commit}:{pkg}/{rel}") if wanted(rel) else None
        base += file_sites(rel, data, f"{short}:{pkg}/{rel}") if data else []
    return base, f"{short}, the commit that added {SCRIPT}"


def _read(path):
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def read_baseline(path):
    try:
        lines = _read(path).splitlines()
    except FileNotFoundError:
        raise BadInput(f"no baseline {shown(path)}; record one with --update") from None
    except (OSError, ValueError) as exc:
        raise BadInput(f"cannot read {shown(path)} ({exc}); redo it with --update")
    head = HEADER.match(lines[0]) if lines else None
    rows = [line.split("\t") for line in lines[1:]]
    if not head or int(head.group(2)) != len(rows) or {len(r) for r in rows} - {5}:
        raise BadInput(f"baseline {shown(path)} is corrupt; redo it with --update")
    if int(head.group(1)) != RULES:
        raise BadInput(f"{shown(path)} has older rules; redo it with --update")
    return [Site(f, fn, k, w, n, w) for f, fn, k, n, w in rows]


def write_baseline(path, tree, sites):
    folder = os.path.dirname(os.path.abspath(path))
    for target in (path, folder):  # by the mode bits: root may write anything
        if os.path.exists(target) and not (
            os.stat(target).st_mode & 0o222 and os.access(target, os.W_OK)
        ):
            raise BadInput(
                f"{shown(target)} is read-only; make it writable (chmod u+w "
                f"{shown(target)}) or pass --baseline PATH"
            )
    if not os.path.isdir(folder):
        raise BadInput(f"no directory {shown(folder)}; pass --baseline PATH")
    text = f"# writer_ratchet.py baseline, rules {RULES}: {len(sites)} sites in "
    text += f"{tree.about}; file, function, kind, line (not compared), write\n"
    for s in sites:
        text += "\t".join((s.file, s.function, s.kind, str(s.line), s.write)) + "\n"
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise BadInput(f"cannot write {shown(path)} ({exc.strerror}); pass --baseline")


# -- command line -------------------------------------------------------------


def _line(site, root):
    path = shown(os.path.join(root, site.file))
    return f"{path}:{site.line}: {site.code}  [{site.kind} in {site.function}]"


def _pick(sites, extra):
    """The sites whose keys the multiset ``extra`` holds."""
    extra, out = Counter(extra), []
    for site in sites:
        if extra[key(site)] > 0:
            extra[key(site)] -= 1
            out.append(site)
    return out


def check(args, argv):
    tree = resolve_tree(args.root)
    sites, files = scan(tree.root)
    if args.list:
        kinds = sorted(Counter(site.kind for site in sites).items())
        kinds = ", ".join([f"{files} files"] + [f"{k} {n}" for k, n in kinds])
        for site in sites:
            print(_line(site, tree.root))
        print(f"{len(sites)} ServerArgs writer sites in {tree.about} ({kinds})")
        return 0
    mine = os.path.join(tree.checkout, "scripts", "ratchet") if tree.checkout else ""
    path = args.baseline or os.path.join(mine or HERE, "baseline.txt")
    if args.update:
        write_baseline(path, tree, sites)
        print(f"writer ratchet: {shown(path)} records {len(sites)} sites; commit it")
        return 0
    if args.baseline or os.path.exists(path) or not tree.checkout:
        base, about = read_baseline(path), shown(path)
    else:
        base, about = anchor_sites(tree, sites) or (None, None)
        if base is None:
            raise BadInput(
                f"no baseline for {tree.about}: no {shown(path)}, no git commit added "
                f"{SCRIPT}; commit the backport, or record one with --update"
            )
    update = [shown(sys.executable), shown(os.path.abspath(__file__)), *argv]
    update = shlex.join(update + ["--update"]) + f", and commit {shown(path)}"
    now, then = Counter(map(key, sites)), Counter(map(key, base))
    added = _pick(sites[::-1], now - then)[::-1]  # the last of equal keys are new
    removed = _pick(base, then - now)
    count, before, where = len(sites), len(base), f"writer sites in {tree.about}"
    if count == before:
        print(f"writer ratchet: OK: {count} ServerArgs {where}, as in {about}")
    else:
        change = f"{'grew' if count > before else 'shrank'} from {before} to {count}"
        print(f"writer ratchet: FAILED: ServerArgs {where} {change} ({about})")
    if added:
        print("New sites:", *(_line(site, tree.root) for site in added), sep="\n  ")
    if removed:
        gone = (f"{s.file}:{s.line} (then) in {s.function}: {s.write}" for s in removed)
        print("Gone (or moved):", *gone, sep="\n  ")
    if count > before:
        print(
            "Do not write onto a shared ServerArgs: give the component its own copy, or "
            f"pass the value. To accept a reviewed write: {update}"
        )
    elif count < before or added:
        print(f"To lock the {'fall' if count < before else 'moves'} in: {update}")
    return 0 if count == before else 1


def main(argv=None):
    parser = argparse.ArgumentParser(
        "writer_ratchet.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--root", help="the sglang tree to scan (see below)")
    parser.add_argument("--baseline", help="the baseline file (see below)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--list", action="store_true", help="print every site")
    mode.add_argument("--update", action="store_true", help="write the baseline")
    args = parser.parse_args(argv)
    try:
        return check(args, sys.argv[1:] if argv is None else list(argv))
    except BadInput as exc:
        print(f"writer ratchet: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # piped into head: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
