"""Extracted e-graph terms -> IR nodes (the inverse of encode.py on every modelled kind)."""
from __future__ import annotations

from egglog import get_callable_args, get_callable_fn, get_literal_value

from .. import ir
from .terms import Coll, Colls


class Decoder:
    def __init__(self, table: list):
        self.table = table
        self.memo: dict = {}

    def _payload(self, term):
        return self.table[get_literal_value(term)][1]

    def items(self, term) -> list[ir.Node]:
        out = []
        while get_callable_fn(term) == Colls.cons:
            head, term = get_callable_args(term)
            out.append(self.node(head))
        return out

    def node(self, term) -> ir.Node:
        key = term.__egg_typed_expr__
        if key not in self.memo:
            self.memo[key] = self._node(get_callable_fn(term), get_callable_args(term))
        return self.memo[key]

    def _node(self, fn, args) -> ir.Node:
        if fn == Coll.leaf:
            return self._payload(args[0])
        if fn == Coll.linear:
            stages = tuple(self._payload(i) for i in args[1].value)
            return ir.Linear(self.node(args[0]), stages)
        if fn == Coll.concat:
            return ir.Concat(tuple(self.items(args[0])))
        if fn == Coll.consolidate:
            return ir.Consolidate(self.node(args[0]))
        if fn == Coll.arrange:
            return ir.Arrange(self.node(args[0]), self._payload(args[1]))
        if fn == Coll.join:
            kind = get_literal_value(args[3])
            on, band = self._payload(args[2]) if kind == 2 else (self._payload(args[2]), None)
            return ir.Join(self.node(args[0]), self.node(args[1]), on, bool(kind), band)
        if fn == Coll.reduce:
            by, reduction = self._payload(args[1])
            return ir.Reduce(self.node(args[0]), by, reduction)
        if fn == Coll.query:
            relations, query, order = self._payload(args[0])
            return ir.Query(tuple(self.items(args[1])), relations, query, order)
        raise ValueError(f"cannot decode {fn}")  # the cost model never extracts others
