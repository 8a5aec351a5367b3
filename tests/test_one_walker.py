"""One walk loop in the core (issue 32): no module of ``formats/`` or ``recovery/`` but
``recovery/walk.py`` (the walker) and ``recovery/ccore.py`` (the compiled core's pure-Python
twin, whose ``chase`` is the C loop's reference) holds a loop that advances a cursor by a
value read from the buffer. A new record layout plugs into the walker as a framing, a
command as a policy; neither brings a loop of its own.

How the test decides, function by function, over the AST of every module (flow-insensitive,
by names; a function's own nodes, not those of functions nested in it):

* **Read from the buffer** (a value "read"): the result of a call whose callee (its last
  name: ``cl.PREFIX.unpack_from`` is ``unpack_from``) is a reader: a struct, bytes or numpy
  decoder of the buffer (``unpack_from``, ``unpack``, ``iter_unpack``, ``from_bytes``,
  ``frombuffer``, ``ndarray``), or a function of the core that returns a read value (a
  fixpoint over every module by name, module-level aliases included: ``check_record``,
  ``decode_message``, ``chase`` (``chase = chase_py``), the batch decoder's ``decode`` ...
  become readers that way); any expression holding one; a local name or
  attribute chain bound (assignment, loop target, ``with ... as``, walrus) to one, to a
  fixpoint. A byte *search* (``find``) gives a position, not a value read: a resync's
  search for the next magic is not a walk (it lives in the walker all the same).
* **A cursor**, in a loop (``for``/``while``, at any depth, generator functions too): a
  name or attribute chain used as a read position in the loop (inside an argument of a
  reader call or the index of an item of a read value) or in a ``while`` test.
* **Advanced**: ``X += v`` or ``X -= v``, or ``X = v`` where ``X`` is loop-carried (read in
  the ``while`` test, or read in the loop before any binding there in source order; a
  ``for`` target is bound afresh), ``v`` read from the buffer. Tuple targets count per
  element (``s, p, why = chase(...)``).
* **State advanced** (the loop is the caller's): ``obj.attr += v`` with ``v`` read, on an
  object other than ``self`` and an attribute used as a read position somewhere in the
  core (``r.cursor += c.rec.computed_size``), and a call ``obj.m(v)`` of a method of the
  same module that does ``self.attr += param`` for such an attribute, ``v`` read
  (``r.advance(consumed)``).

The detector follows names, not objects: a position carried in an object from one
method to another (``self.reput_from`` handed back by a region) is seen only through the
state rule. Four loops of the core are flagged and are not record walks of the commitlog;
they are listed in ``NOT_RECORD_WALKS`` with their reasons, and a test checks that each is
still flagged (the list cannot go stale): the index's hash chain (``cur = prev_index`` of an
entry: a linked list of fixed-size entries), the timer wheel's slot chain (``cur = prev`` of
a 52-byte timer log unit: the same kind of list), the consume queue's repeated starts (a
fixpoint of unit counts) and a backup's digest of a file's new bytes (fixed chunks).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORE = ("formats", "recovery")
ALLOWED = {"recovery/walk.py", "recovery/ccore.py"}
READERS = {"unpack_from", "unpack", "iter_unpack", "from_bytes", "frombuffer", "ndarray"}
# (module, function): flagged loops that are not record walks of the commitlog (see the docstring)
NOT_RECORD_WALKS = {
    ("recovery/query.py", "index_query"): "the index's hash chain: cur = prev_index of an entry",
    (
        "recovery/recover/queues.py",
        "settle_queue",
    ): "a consume queue's unit count after each broker start, to a fixpoint",
    ("recovery/timerstore.py", "slot_chain"): "a timer wheel slot's chain: cur = prevPos of a timer log unit",
    (
        "recovery/safety/backup.py",
        "_hash_result_rest",
    ): "a backup's digest of a file's new bytes, read in fixed chunks (left -= the chunk's length)",
    (
        "recovery/batchcq.py",
        "inner_pairs",
    ): "one record's properties found from its header (p += the body's and topic's lengths), at positions a queue gives",
    (
        "recovery/replicas/dledger.py",
        "first_unequal",
    ): "two DLedger members' byte ranges compared by hashes, resumed at the next entry's position from the index units",
}


def _modules() -> dict[str, ast.Module]:
    out = {}
    for folder in CORE:
        for p in sorted((ROOT / folder).rglob("*.py")):
            rel = p.relative_to(ROOT).as_posix()
            out[rel] = ast.parse(p.read_text(encoding="utf-8"), rel)
    return out


Fn = ast.FunctionDef | ast.AsyncFunctionDef
Loop = ast.For | ast.While | ast.AsyncFor


def _callee(node: ast.Call) -> str | None:
    f = node.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        return f.attr
    return None


def _key(t: ast.AST) -> str | None:
    """A name, or a dotted attribute chain rooted at a name (``r.cursor``)."""
    if isinstance(t, ast.Name):
        return t.id
    if isinstance(t, ast.Attribute):
        base = _key(t.value)
        return None if base is None else f"{base}.{t.attr}"
    return None


def _root(e: ast.AST) -> str | None:
    while isinstance(e, (ast.Attribute, ast.Subscript)):
        e = e.value
    return e.id if isinstance(e, ast.Name) else None


def _functions(tree: ast.AST) -> list[Fn]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _own_nodes(fn: ast.AST) -> list[ast.AST]:
    """The nodes of a function, not of the functions, lambdas and classes nested in it."""
    out: list[ast.AST] = []
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        out.append(n)
        todo.extend(ast.iter_child_nodes(n))
    return out


def _params(fn: Fn) -> set[str]:
    a = fn.args
    return {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]} - {"self", "cls"}


def _bindings(fn: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
    """(target, value) of every binding in ``fn``: assignments, loop targets (bound to
    their iterable), ``with ... as``, walrus, comprehension targets."""
    binds: list[tuple[ast.AST, ast.AST]] = []
    for n in _own_nodes(fn):
        if isinstance(n, ast.Assign):
            binds += [(t, n.value) for t in n.targets]
        elif isinstance(n, (ast.AugAssign, ast.AnnAssign)) and n.value is not None:
            binds.append((n.target, n.value))
        elif isinstance(n, (ast.For, ast.AsyncFor)):
            binds.append((n.target, n.iter))
        elif isinstance(n, ast.withitem) and n.optional_vars is not None:
            binds.append((n.optional_vars, n.context_expr))
        elif isinstance(n, ast.NamedExpr):
            binds.append((n.target, n.value))
        elif isinstance(n, ast.comprehension):
            binds.append((n.target, n.iter))
    return binds


def _target_keys(t: ast.AST) -> list[str]:
    if isinstance(t, (ast.Tuple, ast.List)):
        return [k for el in t.elts for k in _target_keys(el)]
    if isinstance(t, ast.Starred):
        return _target_keys(t.value)
    k = _key(t)
    return [] if k is None else [k]


def _mentions(e: ast.AST, keys: set[str]) -> bool:
    return any(_key(x) in keys for x in ast.walk(e) if isinstance(x, (ast.Name, ast.Attribute)))


def _closure(
    binds: list[tuple[ast.AST, ast.AST]], seed: set[str], through: Callable[[ast.AST, set[str]], bool]
) -> set[str]:
    """``seed`` and every key bound to a value for which ``through(value, keys)`` holds, to
    a fixpoint."""
    keys = set(seed)
    changed = True
    while changed:
        changed = False
        for t, v in binds:
            if through(v, keys):
                for k in _target_keys(t):
                    if k not in keys:
                        keys.add(k)
                        changed = True
    return keys


class _Reads:
    """Reads of the buffer in one function: ``readers`` are the callee names that decode
    from it."""

    def __init__(self, readers: set[str], params: set[str]) -> None:
        self.readers, self.params = readers, params

    def positions(self, scope: ast.AST, values: set[str]) -> set[str]:
        """The keys used as a position of a read in ``scope``: in an argument of a reader
        call, or in the index of an item of a value read (``nxt[j]``)."""
        out: set[str] = set()
        for n in ast.walk(scope):
            parts: list[ast.AST] = []
            if isinstance(n, ast.Call) and _callee(n) in self.readers:
                parts = [*n.args, *(k.value for k in n.keywords)]
            elif isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load) and self.tainted(n.value, values):
                parts = [n.slice]
            out |= {k for part in parts for x in ast.walk(part) if (k := _key(x)) is not None}
        return out

    def tainted(self, e: ast.AST, values: set[str]) -> bool:
        """Whether ``e`` holds a value read from the buffer: a reader call, or one of the
        keys ``values`` bound to one."""
        for x in ast.walk(e):
            if isinstance(x, (ast.Name, ast.Attribute)) and _key(x) in values:
                return True
            if isinstance(x, ast.Call) and _callee(x) in self.readers:
                return True
        return False


def _readers(mods: dict[str, ast.Module]) -> set[str]:
    """The readers: the primitive decoders and every function of the core whose return
    value is read from the buffer (by name, to a fixpoint; module-level aliases too)."""
    readers = set(READERS)
    fns = [fn for tree in mods.values() for fn in _functions(tree)]
    aliases = [
        (t.id, n.value.id)
        for tree in mods.values()
        for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Name)
        for t in n.targets
        if isinstance(t, ast.Name)
    ]
    changed = True
    while changed:
        changed = False
        for alias, name in aliases:  # module-level ``chase = chase_py``
            if name in readers and alias not in readers:
                readers.add(alias)
                changed = True
        for fn in fns:
            if fn.name in readers:
                continue
            r = _Reads(readers, _params(fn))
            binds = _bindings(fn)
            vals = _closure(binds, set(), r.tainted)
            rets = [n.value for n in _own_nodes(fn) if isinstance(n, (ast.Return, ast.Yield)) and n.value is not None]
            if any(r.tainted(x, vals) for x in rets):
                readers.add(fn.name)
                changed = True
    return readers


def _advancers(tree: ast.Module, cursors: set[str]) -> dict[str, set[int]]:
    """The functions of one module doing ``obj.attr += param`` for an attribute used as a
    read position (``cursors``): name -> the positions of those parameters (methods:
    ``self`` not counted)."""
    out: dict[str, set[int]] = {}
    for fn in _functions(tree):
        params = [a.arg for a in fn.args.args]
        if params[:1] == ["self"]:
            params = params[1:]
        for n in _own_nodes(fn):
            if (
                isinstance(n, ast.AugAssign)
                and isinstance(n.target, ast.Attribute)
                and n.target.attr in cursors
                and isinstance(n.value, ast.Name)
                and n.value.id in params
            ):
                out.setdefault(fn.name, set()).add(params.index(n.value.id))
    return out


def _carried(loop: Loop, key: str) -> bool:
    """Whether the loop reads ``key`` before binding it (in source order; the value of a
    binding is read before its target is bound) or in its ``while`` test: the value of
    the previous iteration is used."""
    if isinstance(loop, ast.While) and _mentions(loop.test, {key}):
        return True
    if not isinstance(loop, ast.While) and key in _target_keys(loop.target):
        return False  # bound afresh by every iteration
    events: list[tuple[int, int, int]] = []
    for stmt in loop.body:
        for n in ast.walk(stmt):
            if isinstance(n, (ast.Name, ast.Attribute)) and _key(n) == key:
                store = not isinstance(n.ctx, ast.Load)
                events.append((n.lineno, int(store), n.col_offset))
    return bool(events) and min(events)[1] == 0


def _loops(fn: ast.AST) -> list[Loop]:
    return [n for n in _own_nodes(fn) if isinstance(n, (ast.For, ast.While, ast.AsyncFor))]


def walk_loops(mods: dict[str, ast.Module]) -> list[tuple[str, str, int, str]]:
    """(module, function, line, what) for every cursor of a loop advanced by a value read
    from the buffer."""
    readers = _readers(mods)
    # attributes used as a read position anywhere in the core (``r.cursor``), by last name
    attr_cursors: set[str] = set()
    for tree in mods.values():
        for fn in _functions(tree):
            r = _Reads(readers, _params(fn))
            vals = _closure(_bindings(fn), set(), r.tainted)
            attr_cursors |= {k.rsplit(".", 1)[1] for k in r.positions(fn, vals) if "." in k}
    found: list[tuple[str, str, int, str]] = []
    for rel, tree in mods.items():
        advancers = _advancers(tree, attr_cursors)
        for fn in _functions(tree):
            r = _Reads(readers, _params(fn))
            vals = _closure(_bindings(fn), set(), r.tainted)
            for loop in _loops(fn):
                uses = r.positions(loop, vals)
                if isinstance(loop, ast.While):
                    uses |= {k for x in ast.walk(loop.test) if (k := _key(x)) is not None}
                for n in ast.walk(loop):
                    if isinstance(n, ast.AugAssign) and isinstance(n.op, (ast.Add, ast.Sub)):
                        k = _key(n.target)
                        if k in uses and r.tainted(n.value, vals):
                            found.append((rel, fn.name, n.lineno, f"{k} += ..."))
                    elif isinstance(n, ast.Assign) and r.tainted(n.value, vals):
                        for t in n.targets:
                            for k in _target_keys(t):
                                if k in uses and _carried(loop, k):
                                    found.append((rel, fn.name, n.lineno, f"{k} = ..."))
            for n in _own_nodes(fn):  # state advanced (the loop is the caller's)
                if (
                    isinstance(n, ast.AugAssign)
                    and isinstance(n.target, ast.Attribute)
                    and n.target.attr in attr_cursors
                    and _root(n.target) not in (None, "self")
                    and r.tainted(n.value, vals)
                ):
                    found.append((rel, fn.name, n.lineno, f"{_key(n.target)} += ... (state)"))
                elif (
                    isinstance(n, ast.Call)
                    and _callee(n) in advancers
                    and isinstance(n.func, ast.Attribute)
                    and _root(n.func.value) not in (None, "self")
                    and any(i < len(n.args) and r.tainted(n.args[i], vals) for i in advancers[_callee(n) or ""])
                ):
                    found.append((rel, fn.name, n.lineno, f"{_key(n.func)}(...) (state)"))
    return sorted(set(found))


def test_no_walk_loop_outside_the_walker() -> None:
    mods = _modules()
    found = [f for f in walk_loops(mods) if f[0] not in ALLOWED and (f[0], f[1]) not in NOT_RECORD_WALKS]
    assert not found, "\n".join(f"{m}:{line} {fn}: {what}" for m, fn, line, what in found)


def test_the_exceptions_still_exist() -> None:
    """The allow-listed modules and the one non-record chain exist (the lists cannot go
    stale), and the detector flags each non-record chain (it is really an exception)."""
    mods = _modules()
    assert ALLOWED <= set(mods)
    flagged = {(m, fn) for m, fn, _line, _what in walk_loops(mods)}
    for key in NOT_RECORD_WALKS:
        assert key in flagged, key


@pytest.mark.parametrize(
    "src",
    [
        "def f(buf, end):\n pos = 0\n while pos < end:\n  total, magic = P.unpack_from(buf, pos)\n  pos += total\n",
        "def f(buf, end):\n pos = 0\n while pos < end:\n  c = check_record(buf, pos, end)\n  pos = pos + c.size\n",
        "def f(buf, end):\n p = 0\n while True:\n  s, p, why = chase(buf, p, end)\n  if why: break\n",
        "def f(buf, h):\n pos = 0\n while pos < 9:\n  tot = frombuffer(buf, offset=pos)\n  nxt = h + tot\n  pos = int(nxt[0])\n",
        "def f(r, buf):\n for _ in range(3):\n  c = check_record(buf, r.cursor, 9)\n  r.advance(c.size)\n"
        "class R:\n def advance(self, n):\n  self.cursor += n\n",
        "def f(r, buf):\n c = check_record(buf, r.cursor, 9)\n r.cursor += c.rec.computed_size\n",
    ],
)
def test_the_detector_flags_the_idioms(src: str) -> None:
    """Each idiom of a walk loop is flagged (the check can fail)."""
    mods = {"recovery/x.py": ast.parse(src + "def check_record(buf, pos, end):\n return unpack_from(buf, pos)\n")}
    mods["recovery/y.py"] = ast.parse("def chase(b, p, e):\n return frombuffer(b), p, 0\n")
    assert any(m == "recovery/x.py" and fn == "f" for m, fn, _l, _w in walk_loops(mods)), src


@pytest.mark.parametrize(
    "src",
    [
        "def f(n, step):\n i = 0\n while i < n:\n  i += step\n",
        "def f(lo, hi):\n while lo < hi:\n  mid = (lo + hi) // 2\n  lo = mid + 1\n",
        "def f(buf, end):\n for pos in range(0, end, 20):\n  total, magic = P.unpack_from(buf, pos)\n",
        "def f(buf, end):\n pos = 0\n while pos < end:\n  i = buf.find(b'M', pos)\n  if i < 0: break\n  pos = i + 1\n",
        "def f(buf, end):\n count = 0\n pos = 0\n while pos < end:\n  total, m = P.unpack_from(buf, 0)\n  count += total\n  pos += 8\n",
    ],
)
def test_the_detector_passes_other_loops(src: str) -> None:
    """Loops that do not advance by what they read are not flagged."""
    assert walk_loops({"recovery/x.py": ast.parse(src)}) == []
