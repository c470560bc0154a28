"""TAP helpers shared by spec/peers/peers.py and spec/gpu/interop.py.

Both scripts declare groups of tests with @group, whose descriptions are known up
front (for the plan and the SKIPs), import their peers with import_peers (a peer
that cannot be imported turns its groups into visible SKIPs) and run them with
run_groups; a Python exception in a group is a `not ok` with the traceback as
comments. The counts live here (`failures`, `passed`, `skipped`): a script
copies `failures` into its own globals, where build/peers (spec/peers/peers.c)
reads it from __main__.

Imported as `tap` with spec/peers on sys.path (the scripts put it there).
"""
import sys
import traceback

failures = 0
passed = skipped = 0
_number = 0


def line(text):
    print(text, flush=True)


def comment(text):
    for text_line in str(text).rstrip("\n").splitlines():
        line("# " + text_line)


# ---- peers -------------------------------------------------------------------

def import_numpy():
    """NumPy 2 or later (Debian's 1.x is not a DLPack 1.x peer)."""
    import numpy
    if int(numpy.__version__.split(".")[0]) < 2:
        raise ImportError("numpy %s < 2 (from %s)" % (numpy.__version__, numpy.__file__))
    return numpy


def import_torch():
    import torch
    import torch.utils.dlpack  # noqa: F401
    return torch


def import_peers(*importers):
    """(name, importer) pairs -> {name: (module or None, reason)}; importing never raises."""
    peers = {}
    for name, importer in importers:
        try:
            peers[name] = (importer(), None)
        except Exception as e:  # ImportError, but also a broken build or a CUDA error raising anything
            peers[name] = (None, "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else ""))
    return peers


def versions(lua_version, peers, names, missing, extra=()):
    """The comment line naming Lua, Python, `extra` and each peer's version (or why it is `missing`)."""
    parts = [lua_version, "Python %s" % sys.version.split()[0]] + list(extra)
    for name in names:
        mod, reason = peers[name]
        parts.append("%s %s" % (name, mod.__version__) if mod else "%s %s (%s)" % (name, missing, reason))
    comment(", ".join(parts))


# ---- TAP groups --------------------------------------------------------------

groups = []


def group(title, needs, tests):
    """Declare a group of tests: their descriptions are known up front (for the plan and SKIPs)."""
    def register(fn):
        groups.append((title, needs, tests, fn))
        return fn
    return register


class Checker:
    def __init__(self, title, tests):
        self.title, self.tests, self.done = title, tests, set()

    def _next(self, desc):
        global _number
        assert desc in self.tests and desc not in self.done, desc
        self.done.add(desc)
        _number += 1
        return _number

    def ok(self, desc, cond, *diag):
        global failures, passed
        number = self._next(desc)
        if cond:
            passed += 1
        else:
            failures += 1
        line("%sok %d - %s: %s" % ("" if cond else "not ", number, self.title, desc))
        if not cond:
            for d in diag:
                comment(d)
        return cond

    def eq(self, desc, got, want):
        return self.ok(desc, got == want, "got:  %r" % (got,), "want: %r" % (want,))

    def skip(self, desc, reason):
        global skipped
        skipped += 1
        line("ok %d - %s: %s # SKIP %s" % (self._next(desc), self.title, desc, reason))

    def rest(self, mark, reason=None, diag=None):
        """Close the group: every test not yet reported becomes a skip or a failure."""
        global failures
        for desc in self.tests:
            if desc in self.done:
                continue
            if mark == "skip":
                self.skip(desc, reason)
            else:
                failures += 1
                line("not ok %d - %s: %s" % (self._next(desc), self.title, desc))
                if diag:
                    comment(diag)
                    diag = None


def raises(fn, *exc):
    try:
        fn()
    except exc as e:
        return e
    return None


# ---- run -----------------------------------------------------------------------------

def plan():
    line("1..%d" % sum(len(tests) for _, _, tests, _ in groups))


def run_groups(peers, missing, open_lua, close_lua):
    """Run every group in order between open_lua() and close_lua(); a group whose peers
    are missing prints its tests as SKIPs ("<peer> <missing>: <reason>"). Returns failures."""
    for title, needs, tests, fn in groups:
        needs = (needs,) if isinstance(needs, str) else needs
        checker = Checker(title, tests)
        absent = [n for n in needs if peers[n][0] is None]
        if absent:
            checker.rest("skip", "%s %s: %s" % (absent[0], missing, peers[absent[0]][1]))
            continue
        open_lua()
        try:
            fn(checker)
        except Exception:
            checker.rest("fail", diag="%s raised:\n%s" % (title, traceback.format_exc()))
        checker.rest("fail", diag="not reached")
        close_lua()
    return failures


def summary():
    line("%d passed, %d failed, %d skipped" % (passed, failures, skipped))
