"""Run a fork's shipped tests as patched, then once for each breakage of the fix.

Run in the fork's root, by python3 there, as
``python3 -c "import runpy; runpy.run_path(THIS_FILE, run_name='__main__')"
BREAKAGES TEST_FILE...``, BREAKAGES being a JSON list of ``[path, old, new]``
(``fix_breakages.Breakage``).

Importing a release's sglang costs about 4 s of CPU here, and a line has up
to eight breakages, so the fork's sglang is imported once: this process loads
the test files, which import it, and then, for the fork as patched and for
each breakage, forks a process that makes the edit, loads the test files again
and runs them. An imported module takes the edit one way: the function or
method that holds the edited text is compiled again from the file as edited,
with its module's globals, and put in place of the old one on its class or
module, and in every module that imported it by name. The scheduler, model
code and the tests call it from there. The fork's files are not changed.

Prints, for each run, ``=== breakage N`` (0: the fork as patched; N: the Nth
breakage), then for each failed test or subtest ``FAILED TYPE TEST_ID`` (the
type of what it raised) and its traceback, then ``ran COUNT``.
"""

import __future__

import ast
import functools
import importlib
import importlib.util
import json
import linecache
import os
import sys
import traceback
import unittest


class Failures(unittest.TestResult):
    def report(self, test, err):
        raised = err[1]
        # CustomTestCase runs each test through sglang's retry(), which raises
        # a plain Exception while it handles what the test raised.
        if type(raised) is Exception and str(raised).startswith("retry()"):
            raised = raised.__context__
        print("FAILED", type(raised).__name__, test.id())
        print("".join(traceback.format_exception(raised)))

    def addFailure(self, test, err):
        self.report(test, err)

    def addError(self, test, err):
        self.report(test, err)

    def addSubTest(self, test, subtest, err):
        if err is not None:
            self.report(subtest, err)


def load_tests(files):
    """The tests of ``files``, each loaded as ``python3 FILE`` loads it."""
    suite = unittest.TestSuite()
    for path in files:
        folder = os.path.dirname(os.path.abspath(path))
        if folder not in sys.path:
            sys.path.insert(0, folder)
        name = os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        module = sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        suite.addTests(unittest.defaultTestLoader.loadTestsFromModule(module))
    return suite


def read(path):
    with open(path, encoding="utf-8") as fh:
        return fh.read()


@functools.cache
def parsed(path):
    return ast.parse(read(path))


class Function:
    """The top-level function or method of the fork's ``path`` whose lines
    hold all of ``old``: the classes it is in (outermost first), its name, its
    first line (its first decorator's) and its last, and the module's
    ``from __future__`` flags, which its code is compiled with."""

    def __init__(self, path, old):
        source = read(path)
        if source.count(old) != 1:
            raise AssertionError(f"{path}: the text to replace is not there once")
        first = source[: source.index(old)].count("\n") + 1
        last = first + old.rstrip("\n").count("\n")
        self.classes, body = [], parsed(path).body
        while True:
            node = next(
                (n for n in body if n.lineno <= first and last <= n.end_lineno), None
            )
            if isinstance(node, ast.ClassDef):
                self.classes.append(node)
                body = node.body
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                break
            else:
                raise AssertionError(f"{path}:{first}: the edit is in no function")
        self.name = node.name
        self.first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        self.last = node.end_lineno
        self.flags = 0
        for statement in parsed(path).body:
            if (
                isinstance(statement, ast.ImportFrom)
                and statement.module == "__future__"
            ):
                for alias in statement.names:
                    self.flags |= getattr(__future__, alias.name).compiler_flag

    def compiled(self, source, filename, grown):
        """Its code in ``source``, the module's file edited to have ``grown``
        more lines in it (or fewer, if negative)."""
        lines = source.splitlines(keepends=True)
        # Its lines, under its classes' headers, parsed alone.
        headers = [f"{' ' * c.col_offset}class {c.name}:\n" for c in self.classes]
        text = "".join(headers + lines[self.first - 1 : self.last + grown])
        node = ast.parse(text)
        for _ in self.classes:
            node = node.body[0]
        function = node.body[0]
        ast.increment_lineno(function, self.first - 1 - len(headers))
        module = ast.Module(body=[function], type_ignores=[])
        return compile(module, filename, "exec", self.flags, dont_inherit=True)


def break_the_fix(path, old, new, function):
    """Put ``function`` (a ``Function`` of ``path``), as the file would have it
    with ``old`` replaced by ``new``, in place of the imported one."""
    module_path = os.path.splitext(os.path.relpath(path, "python"))[0]
    module = importlib.import_module(module_path.replace(os.sep, "."))
    edited = read(module.__file__).replace(old, new)
    made = {}
    grown = new.count("\n") - old.count("\n")
    exec(function.compiled(edited, module.__file__, grown), vars(module), made)
    owner = module
    for node in function.classes:
        owner = getattr(owner, node.name)
    before, after = vars(owner)[function.name], made[function.name]
    setattr(owner, function.name, after)
    if owner is module:
        # What imported it by name at import time holds it too.
        for other in list(sys.modules.values()):
            names = getattr(other, "__dict__", {})
            for name in [name for name, value in names.items() if value is before]:
                setattr(other, name, after)
    # Tracebacks show the edited lines.
    lines = edited.splitlines(keepends=True)
    linecache.cache[module.__file__] = (len(edited), None, lines, module.__file__)


def main():
    breakages, files = json.loads(sys.argv[1]), sys.argv[2:]
    functions = [Function(path, old) for path, old, _ in breakages]
    load_tests(files)
    for index in range(len(breakages) + 1):
        print(f"=== breakage {index}", flush=True)
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                if index:
                    break_the_fix(*breakages[index - 1], functions[index - 1])
                result = Failures()
                load_tests(files).run(result)
                print("ran", result.testsRun)
                status = 0
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(status)
        os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
