"""Conjunctive queries: the text front end and the delta-query plan of a worst-case optimal join.

`parse` reads `head(vars) :- atoms, comparisons`; `delta_rules` turns the query into one
`DeltaRule` per atom (DESIGN section 6): start from that atom's changes, bind one variable
at a time, read earlier atoms as of `time <= t` ("new") and later ones as of `time < t`
("old"), so the rules' outputs sum to exactly the change of the query's result, with no
concurrent change lost or counted twice. Rules are plain data for the executor and kernels;
`run_rules_python` states what they mean.
"""
from __future__ import annotations

import operator
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Optional

from .errors import PlanError
from .schema import check_names

Value = int | str


# --------------------------------------------------------------------------- the query
@dataclass(frozen=True)
class Term:
    """A term of an atom or a comparison: a `Var` or a `Const`."""


@dataclass(frozen=True)
class Var(Term):
    name: str

    def __str__(self):
        return self.name


@dataclass(frozen=True)
class Const(Term):
    value: Value

    def __str__(self):
        if isinstance(self.value, str):
            return "'" + self.value.replace("'", "''") + "'"
        return str(self.value)


@dataclass(frozen=True)
class Atom:
    """`relation(terms)`: term k stands for the relation's column k."""

    relation: str
    terms: tuple[Term, ...]

    def vars(self) -> tuple[str, ...]:
        """Distinct variables, in order of first column."""
        return tuple(dict.fromkeys(t.name for t in self.terms if isinstance(t, Var)))

    def __str__(self):
        return f"{self.relation}({', '.join(map(str, self.terms))})"


_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
        "=": operator.eq, "!=": operator.ne}


@dataclass(frozen=True)
class Comparison:
    """A filter `left op right`; like SQL, a comparison with None never holds."""

    left: Term
    op: str
    right: Term

    def vars(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t.name for t in (self.left, self.right)
                                   if isinstance(t, Var)))

    def holds(self, binding: dict) -> bool:
        a, b = (binding[t.name] if isinstance(t, Var) else t.value
                for t in (self.left, self.right))
        return a is not None and b is not None and _OPS[self.op](a, b)

    def __str__(self):
        return f"{self.left} {self.op} {self.right}"

    def sql(self) -> str:
        """The comparison as a Spark SQL condition over columns named like the variables."""
        return f"{sql(self.left)} {self.op} {sql(self.right)}"


def sql(term: Term) -> str:
    """A term as Spark SQL: a variable's backquoted column, or a constant's literal."""
    if isinstance(term, Var):
        return f"`{term.name}`"
    if isinstance(term.value, str):
        return "'" + term.value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return repr(term.value)


@dataclass(frozen=True)
class Query:
    head_name: str
    head: tuple[str, ...]
    atoms: tuple[Atom, ...]
    comparisons: tuple[Comparison, ...] = ()

    def variables(self) -> tuple[str, ...]:
        """Every variable the atoms bind, in order of appearance."""
        return tuple(dict.fromkeys(v for a in self.atoms for v in a.vars()))

    def relations(self) -> tuple[str, ...]:
        """Distinct relation names, in order of appearance."""
        return tuple(dict.fromkeys(a.relation for a in self.atoms))

    def binding(self, var: str) -> tuple[str, int]:
        """(relation, column) where `var` first appears: the output column's type."""
        for a in self.atoms:
            for k, t in enumerate(a.terms):
                if t == Var(var):
                    return a.relation, k
        raise KeyError(var)

    def __str__(self):
        body = [str(a) for a in self.atoms] + [str(c) for c in self.comparisons]
        return f"{self.head_name}({', '.join(self.head)}) :- {', '.join(body)}"


# --------------------------------------------------------------------------- parsing
_TOKEN = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<int>-?[0-9]+)"
                    r"|(?P<str>'(?:[^']|'')*')|(?P<op>:-|<=|>=|!=|[<>=(),.])")


class _Parser:
    """Recursive descent over tokens (kind, text, column); operators are their own kind."""

    def __init__(self, text: str):
        self.text, self.tokens, self.at = text, [], 0
        pos = 0
        while True:
            while pos < len(text) and text[pos].isspace():
                pos += 1
            if pos == len(text):
                break
            m = _TOKEN.match(text, pos)
            if not m:
                what = ("unterminated string" if text[pos] == "'"
                        else f"unexpected character {text[pos]!r}")
                raise self.error(f"{what} at column {pos + 1}")
            kind = m.lastgroup if m.lastgroup != "op" else m.group()
            self.tokens.append((kind, m.group(), pos + 1))
            pos = m.end()
        self.tokens.append(("end", "", len(text) + 1))

    def error(self, msg: str) -> PlanError:
        return PlanError(f"query {self.text!r}: {msg}")

    def peek(self, ahead: int = 0):
        return self.tokens[min(self.at + ahead, len(self.tokens) - 1)]

    def accept(self, kind: str) -> bool:
        if self.peek()[0] == kind:
            self.at += 1
            return True
        return False

    def expect(self, kinds, what: str) -> str:
        kind, text, col = self.peek()
        if kind not in kinds:
            got = "the end of the text" if kind == "end" else repr(text)
            raise self.error(f"expected {what} at column {col}, got {got}")
        self.at += 1
        return text

    def term(self, what: str) -> Term:
        text = self.expect(("name", "int", "str"), what)
        kind = self.tokens[self.at - 1][0]
        if kind == "name":
            return Var(text)
        return Const(int(text)) if kind == "int" else Const(text[1:-1].replace("''", "'"))

    def query(self) -> Query:
        name = self.expect(("name",), "the head's name")
        self.expect(("(",), "'(' after the head's name")
        head = []
        while True:
            t = self.term("a head variable")
            if isinstance(t, Const):
                raise PlanError(f"query '{name}': head term {t} is a constant "
                                f"(rule: the head lists variables only)")
            head.append(t.name)
            if not self.accept(","):
                break
        self.expect((")",), "',' or ')' in the head")
        self.expect((":-",), "':-' after the head")
        atoms, comparisons = [], []
        while True:
            if self.peek()[0] == "name" and self.peek(1)[0] == "(":
                atoms.append(self.atom())
            else:
                left = self.term("an atom or a comparison")
                op = self.expect(tuple(_OPS), "a comparison operator (<, <=, >, >=, =, !=)")
                comparisons.append(Comparison(left, op, self.term("a term after " + op)))
            if not self.accept(","):
                break
        self.accept(".")
        self.expect(("end",), "',' or the end of the query")
        if not atoms:
            raise PlanError(f"query '{name}': no atom (rule: a query reads at least one relation)")
        return Query(name, tuple(head), tuple(atoms), tuple(comparisons))

    def atom(self) -> Atom:
        relation = self.expect(("name",), "a relation name")
        self.expect(("(",), "'('")
        terms = [self.term(f"a term of {relation}")]
        while self.accept(","):
            terms.append(self.term(f"a term of {relation}"))
        self.expect((")",), f"',' or ')' closing {relation}(...)")
        return Atom(relation, tuple(terms))


def parse(text: str) -> Query:
    """`head(x, ...) :- rel(term, ...), ..., x < y, ...` (a final '.' is allowed); terms
    are variables, integer literals or single-quoted strings ('' escapes a quote)."""
    if not isinstance(text, str):
        raise PlanError(f"query: expects the query's text, got {type(text).__name__}")
    return _Parser(text).query()


def validate(query: Query, columns: dict[str, Optional[list[str]]]) -> None:
    """Refuse a query the relations cannot answer. `columns` maps each known relation to its
    column names, or to None where they are only known at run time (arity checked then)."""
    where = f"query '{query.head_name}'"
    for a in query.atoms:
        if a.relation not in columns:
            raise PlanError(f"{where}: unknown relation '{a.relation}' in atom {a} (rule: every "
                            f"atom names a known relation; known: {', '.join(sorted(columns))})")
        cols = columns[a.relation]
        if cols is not None and len(cols) != len(a.terms):
            raise PlanError(f"{where}: arity mismatch in atom {a}: relation '{a.relation}' "
                            f"({', '.join(cols)}) expected {len(cols)} terms, got {len(a.terms)} "
                            f"(rule: one term per column)")
    bound = set(query.variables())
    for i, v in enumerate(query.head):
        if v in query.head[:i]:
            raise PlanError(f"{where}: head variable '{v}' is repeated "
                            f"(rule: the head lists distinct variables)")
        if v not in bound:
            raise PlanError(f"{where}: head variable '{v}' is unbound "
                            f"(rule: every head variable appears in an atom)")
    check_names(list(query.head), where)
    for c in query.comparisons:
        if not c.vars():
            raise PlanError(f"{where}: comparison {c} has no variable "
                            f"(rule: a comparison filters variables)")
        for v in c.vars():
            if v not in bound:
                raise PlanError(f"{where}: comparison {c} uses variable '{v}' that no atom "
                                f"binds (rule: comparisons filter variables bound by atoms)")


# --------------------------------------------------------------------------- variable order
def _stuck(query: Query, order) -> Optional[tuple[int, str]]:
    """The first (seed atom, variable) whose step in `order` has no extender: no atom has
    that variable as its only unbound one. None when every delta rule can follow `order`."""
    for i, seed in enumerate(query.atoms):
        bound = set(seed.vars())
        for v in order:
            if v not in bound:
                if not any(v in a.vars() and set(a.vars()) - {v} <= bound for a in query.atoms):
                    return i, v
                bound.add(v)
    return None


def _search(query: Query, first: tuple[str, ...]) -> Optional[tuple[str, ...]]:
    """Depth-first over variable orders, most promising variable first (see plan_order),
    pruning a prefix as soon as some delta rule cannot follow it. Whether a prefix can be
    completed depends only on its set of variables, so failed sets are remembered (2^n sets,
    not n! orders); an atom with two variables no other atom has fails at once (another
    atom's delta rule cannot bind either first)."""
    variables = query.variables()
    seen = {v: k for k, v in enumerate(variables)}
    if len(query.atoms) > 1:
        for a in query.atoms:
            others = {v for b in query.atoms if b is not a for v in b.vars()}
            if len(set(a.vars()) - others) > 1:
                return None
    failed: set = set()

    def extenders(v, bound):
        return sum(v in a.vars() and set(a.vars()) - {v} <= bound for a in query.atoms)

    def dfs(prefix: tuple[str, ...]):
        if len(prefix) == len(variables):
            return prefix
        bound = frozenset(prefix)
        if bound in failed:
            return None
        for v in sorted((v for v in variables if v not in bound),
                        key=lambda v: (v not in first, -extenders(v, bound), seen[v])):
            if _stuck(query, prefix + (v,)) is None:
                found = dfs(prefix + (v,))
                if found:
                    return found
        failed.add(bound)
        return None

    return dfs(())


def plan_order(query: Query, sizes: Optional[dict[str, int]] = None) -> tuple[str, ...]:
    """A variable order every delta rule can follow, by a greedy heuristic: start with the
    variables of the most constrained atom (smallest relation when `sizes` are known, then
    most constants and repeated variables, then first), then repeatedly take the unbound
    variable that the most atoms can extend (atoms whose other variables are all bound),
    ties by first appearance. A choice that leaves some delta rule without an extender is
    backtracked (a path a-b-c-d needs a middle-out order such as b, c, a, d)."""
    def constraint(k: int):
        a = query.atoms[k]
        filters = len(a.terms) - len(a.vars())  # constants and repeated variables
        return ((sizes or {}).get(a.relation, 0), -filters, k)

    start = query.atoms[min(range(len(query.atoms)), key=constraint)]
    found = _search(query, start.vars())
    if found is None:
        raise PlanError(f"query '{query.head_name}': no variable order lets every delta rule "
                        f"bind one variable at a time (rule: each variable not bound by an "
                        f"atom's changes must be the only unbound variable of another atom; "
                        f"an atom with two variables that no other atom binds cannot be "
                        f"extended)")
    return found


# --------------------------------------------------------------------------- delta rules
@dataclass(frozen=True)
class Extender:
    """An atom that binds `var` for a prefix: its records whose `key` columns equal the
    prefix's variables (and whose `constants` match) propose `var`'s values (column
    `value`; `repeats` are further columns that must hold the same value). Read as of
    `time <= t` ("new", atoms before the seed) or `time < t` ("old", atoms after it)."""

    atom: int
    relation: str
    key: tuple[tuple[int, str], ...]  # (column, bound variable)
    value: int
    repeats: tuple[int, ...]
    reads: str
    constants: tuple[tuple[int, Value], ...]

    def label(self) -> str:
        filters = [v for _, v in self.key] + [f"c{k}={Const(x)}" for k, x in self.constants]
        return f"{self.relation}#{self.atom}[{', '.join(filters)}] {self.reads}"


@dataclass(frozen=True)
class Validator:
    """An atom all of whose variables the seed binds (same variables as the seed, or a
    repeated atom): it never extends, it multiplies each prefix by its multiplicity of the
    record the prefix determines (`columns` -> variables, plus `constants`)."""

    atom: int
    relation: str
    columns: tuple[tuple[int, str], ...]  # (column, variable), every variable term
    reads: str
    constants: tuple[tuple[int, Value], ...]

    def label(self) -> str:
        return f"{self.relation}#{self.atom}{_pattern(self.columns, self.constants)} {self.reads}"


@dataclass(frozen=True)
class Extension:
    """Bind `var`: every extender counts its candidates, the smallest proposes, the others
    validate; then the `comparisons` whose last variable is `var` filter."""

    var: str
    extenders: tuple[Extender, ...]
    comparisons: tuple[Comparison, ...]


@dataclass(frozen=True)
class DeltaRule:
    """The changes of atom `seed` (relation `relation`) at time t, extended to full
    assignments. The seed binds `prefix` from its `columns` ((column, variable) for every
    variable term: a variable listed twice needs equal non-null values) where its
    `constants` match and `comparisons` over the prefix hold; `validators` then weigh the
    prefix; `steps` bind the remaining variables in order. Output diff = seed diff x the
    product of the multiplicities read."""

    seed: int
    relation: str
    prefix: tuple[str, ...]
    columns: tuple[tuple[int, str], ...]
    constants: tuple[tuple[int, Value], ...]
    comparisons: tuple[Comparison, ...]
    validators: tuple[Validator, ...]
    steps: tuple[Extension, ...]

    def label(self) -> str:
        out = f"d {self.relation}#{self.seed}{_pattern(self.columns, self.constants)}"
        out += _where(self.comparisons)
        if self.validators:
            out += " validate " + ", ".join(v.label() for v in self.validators)
        for s in self.steps:
            verb = "propose" if len(s.extenders) == 1 else "count/propose/validate"
            out += (f" -> {s.var}: {verb} " + ", ".join(e.label() for e in s.extenders)
                    + _where(s.comparisons))
        return out


def _pattern(columns, constants) -> str:
    terms = dict(columns) | {k: str(Const(x)) for k, x in constants}
    return "(" + ", ".join(terms[k] for k in sorted(terms)) + ")"


def _where(comparisons) -> str:
    return " where " + " and ".join(map(str, comparisons)) if comparisons else ""


def delta_rules(query: Query, order) -> tuple[DeltaRule, ...]:
    """One DeltaRule per atom, binding variables in `order` (restricted to those the seed
    leaves unbound). An atom extends variable v at the first step where v is its only
    unbound variable; an atom never in that case has all its variables bound by the seed and
    validates right after it (a later step binds some variable of any other atom, and that
    atom was then single-unbound). So every atom but the seed is used exactly once."""
    where = f"query '{query.head_name}'"
    variables = query.variables()
    if isinstance(order, str) or set(order) != set(variables) or len(order) != len(variables):
        raise PlanError(f"{where}: order {order!r} must list each variable once: "
                        f"{', '.join(variables)} (rule: order is a permutation of the variables)")
    order = tuple(order)
    stuck = _stuck(query, order)
    if stuck:
        i, v = stuck
        better = _search(query, ())
        hint = f"; try order={list(better)}" if better else "; no order can (see plan_order)"
        raise PlanError(f"{where}: order {list(order)} is not extendable: the delta rule of "
                        f"atom #{i} {query.atoms[i]} cannot bind '{v}', no atom has it as its "
                        f"only unbound variable{hint} (rule: bind one variable at a time)")
    return tuple(_rule(query, i, order) for i in range(len(query.atoms)))


def _var_columns(atom: Atom, skip: str = "") -> tuple[tuple[int, str], ...]:
    return tuple((k, t.name) for k, t in enumerate(atom.terms)
                 if isinstance(t, Var) and t.name != skip)


def _constants(atom: Atom) -> tuple[tuple[int, Value], ...]:
    return tuple((k, t.value) for k, t in enumerate(atom.terms) if isinstance(t, Const))


def _rule(query: Query, i: int, order: tuple[str, ...]) -> DeltaRule:
    seed = query.atoms[i]
    bound = set(seed.vars())
    pending = [c for c in query.comparisons]

    def ready() -> tuple[Comparison, ...]:
        done = tuple(c for c in pending if set(c.vars()) <= bound)
        pending[:] = [c for c in pending if c not in done]
        return done

    def reads(j: int) -> str:
        return "new" if j < i else "old"

    comparisons = ready()
    used = {i} | {j for j, a in enumerate(query.atoms) if set(a.vars()) <= bound}
    validators = tuple(Validator(j, a.relation, _var_columns(a), reads(j), _constants(a))
                       for j, a in enumerate(query.atoms) if j in used and j != i)
    steps = []
    for v in order:
        if v in bound:
            continue
        extenders = []
        for j, a in enumerate(query.atoms):
            if j not in used and v in a.vars() and set(a.vars()) - {v} <= bound:
                cols = [k for k, t in enumerate(a.terms) if t == Var(v)]
                extenders.append(Extender(j, a.relation, _var_columns(a, v), cols[0],
                                          tuple(cols[1:]), reads(j), _constants(a)))
                used.add(j)
        bound.add(v)
        steps.append(Extension(v, tuple(extenders), ready()))
    assert len(used) == len(query.atoms) and not pending, "every atom and comparison once"
    return DeltaRule(i, seed.relation, seed.vars(), _var_columns(seed), _constants(seed),
                     comparisons, validators, tuple(steps))


# --------------------------------------------------------------------------- their meaning
def run_rules_python(query: Query, rules, updates: dict[str, list]) -> list:
    """What delta rules compute, in plain Python: at every time t, each rule extends its
    seed's updates at t, reading other atoms as of <= t ("new") or < t ("old"); the summed,
    consolidated (unsorted) (head record, time, diff) updates are the query's output changes.
    A second oracle beside the interpreter's recount: it checks the rules themselves, and
    the executor's rules one by one."""
    out: Counter = Counter()
    for t in sorted({t for ups in updates.values() for _, t, _ in ups}):
        state = {(rel, reads): _as_of(ups, t, reads) for rel, ups in updates.items()
                 for reads in ("new", "old")}
        for rule in rules:
            for rec, s, d in updates.get(rule.relation, []):
                if s == t:
                    for binding, m in _run_rule(rule, tuple(rec), state):
                        out[tuple(binding[v] for v in query.head), t] += d * m
    return [(rec, t, d) for (rec, t), d in out.items() if d != 0]


def _as_of(ups, t: int, reads: str) -> Counter:
    acc: Counter = Counter()
    for rec, s, d in ups:
        if s < t or (s == t and reads == "new"):
            acc[tuple(rec)] += d
    return acc


def _bind(binding: dict, var: str, value) -> bool:
    """Bind or check `var`; a second occurrence matches only an equal non-null value."""
    if var in binding:
        return value is not None and binding[var] is not None and binding[var] == value
    binding[var] = value
    return True


def _run_rule(rule: DeltaRule, rec: tuple, state) -> list[tuple[dict, int]]:
    binding: dict = {}
    if not all(rec[k] is not None and rec[k] == x for k, x in rule.constants):
        return []
    if not all(_bind(binding, v, rec[k]) for k, v in rule.columns):
        return []
    if not all(c.holds(binding) for c in rule.comparisons):
        return []
    m = 1
    for val in rule.validators:
        cols = {k: binding[v] for k, v in val.columns} | dict(val.constants)
        if any(x is None for x in cols.values()):
            return []
        m *= state[val.relation, val.reads].get(tuple(cols[k] for k in sorted(cols)), 0)
    prefixes = [(binding, m)] if m else []
    for step in rule.steps:
        grown = []
        for b, m in prefixes:
            counts = [_candidates(e, b, state) for e in step.extenders]
            for value in counts[0]:
                if len(counts) > 1 and value is None:
                    continue  # a variable shared by atoms never matches null
                mult = m
                for c in counts:
                    mult *= c.get(value, 0)
                b2 = b | {step.var: value}
                if mult and all(c.holds(b2) for c in step.comparisons):
                    grown.append((b2, mult))
        prefixes = grown
    return prefixes


def _candidates(e: Extender, binding: dict, state) -> dict:
    """value of e.var -> summed multiplicity of e's matching records."""
    out: dict = defaultdict(int)
    for rec, m in state[e.relation, e.reads].items():
        if (m and all(rec[k] is not None and rec[k] == binding[v] for k, v in e.key)
                and all(rec[k] is not None and rec[k] == x for k, x in e.constants)
                and all(rec[k] is not None and rec[k] == rec[e.value] for k in e.repeats)):
            out[rec[e.value]] += m
    return out
