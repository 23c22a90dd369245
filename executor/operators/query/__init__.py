"""Conjunctive queries as worst-case optimal delta rules: the rules on array kernels,
value codes for constants, and the Spark placement's lookups.
"""
from __future__ import annotations

from executor.operators.join import comparable
from executor.time import DIFF, TIME
from plans import ir
from plans.errors import PlanError
from plans.query import Var


def check_variables(plan, schemas: dict) -> None:
    """Refuse, when the runner is built, a query whose variable stands for columns whose
    types are not `comparable` (join/__init__.py): its atoms meet on that variable, as a
    join on a key (schemas: each node's resolved update schema)."""
    for node in ir.topological(plan.values()):
        if not isinstance(node, ir.Query):
            continue
        columns = {name: [f for f in schemas[kid].fields if f.name not in (TIME, DIFF)]
                   for name, kid in zip(node.relations, node.inputs)}
        seen: dict = {}  # variable -> (atom, column) of its first occurrence
        for atom in node.query.atoms:
            for term, field in zip(atom.terms, columns[atom.relation]):
                if not isinstance(term, Var):
                    continue
                first = seen.setdefault(term.name, (atom, field))
                if not comparable(first[1].dataType, field.dataType):
                    raise PlanError(
                        f"query {node.query.head_name}: variable {term.name} stands for "
                        f"{first[0].relation}.{first[1].name} "
                        f"({first[1].dataType.simpleString().upper()}) and "
                        f"{atom.relation}.{field.name} ({field.dataType.simpleString().upper()})"
                        f" (rule: the columns a variable joins are of one type, or all "
                        f"integers; CAST one to the other's type)")
