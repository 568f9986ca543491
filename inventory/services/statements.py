"""The registration path's SQL, compiled once per process instead of once per request.

Django compiles every query anew (resolving lookups, ordering, the select list): at
1,000 registrations at once that was about a fifth of a worker's CPU for a
re-registration, which runs four statements (docs/benchmarks.md, issue 13). The
statements here are the ORM's own: a query is compiled once per database alias from
the queryset the caller describes (with stand-in values), and later calls only pass
new parameters. Inserts and updates write the same columns and values as
Model.save() would (each field's pre_save and get_db_prep_save), so auto_now,
defaults and JSON encoding behave as before. Node and NodeEvent have no save
signals, which is what makes skipping Model.save() safe; keep it that way or call
save() instead.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from django.db import connections, router
from django.db.models import Model, QuerySet

_lock = threading.Lock()


class PreparedSelect:
    """A SELECT compiled from `build(**stand_ins)` once per alias, run with real values.

    Each keyword names the field of `model` its value is compared with; each stand-in
    must appear exactly once among the compiled parameters (checked when compiling),
    so that a call's values, prepared as the ORM prepares them, take their places.
    """

    def __init__(self, model: type[Model], build: Callable[..., QuerySet], **stand_ins) -> None:
        self.model, self.build, self.stand_ins = model, build, stand_ins
        self._compiled: dict[tuple[str, str], tuple[str, dict[str, int]]] = {}

    def _prepared(self, name: str, value, connection) -> object:
        field = self.model._meta.get_field(name)
        return field.get_db_prep_value(field.get_prep_value(value), connection, prepared=True)

    def _compile(self, alias: str) -> tuple[str, dict[str, int]]:
        connection = connections[alias]
        key = (alias, connection.vendor)
        compiled = self._compiled.get(key)
        if compiled is None:
            query = self.build(**self.stand_ins).query
            sql, params = query.get_compiler(using=alias).as_sql()
            params = list(params)
            if len(params) != len(self.stand_ins):
                raise ValueError(f"{self.model.__name__}: expected one parameter per stand-in")
            positions = {
                name: params.index(self._prepared(name, value, connection))
                for name, value in self.stand_ins.items()
            }
            compiled = (sql, positions)
            with _lock:
                self._compiled[key] = compiled
        return compiled

    def run(self, **values) -> list:
        """The model instances the query finds for `values` (one per stand-in)."""
        alias = router.db_for_read(self.model)
        connection = connections[alias]
        sql, positions = self._compile(alias)
        params: list = [None] * len(positions)
        for name, position in positions.items():
            params[position] = self._prepared(name, values[name], connection)
        return list(self.model.objects.db_manager(alias).raw(sql, params))


def _columns(model: type[Model]) -> list:
    return [f for f in model._meta.concrete_fields if not f.primary_key]


def insert(obj: Model, *, unless_taken: bool = False) -> bool:
    """INSERT `obj` as save(force_insert=True) would; True (and obj.pk set) if it went in.

    With `unless_taken`, ON CONFLICT DO NOTHING: a row holding one of its unique values
    leaves the table as it is and returns False, and the transaction carries on (a plain
    INSERT fails; Django's bulk_create can ignore conflicts but then does not tell
    whether the row went in).
    """
    model = type(obj)
    connection = connections[router.db_for_write(model)]
    quote = connection.ops.quote_name
    meta = model._meta
    fields = _columns(model)
    # Only the model's own (quoted) names are formatted in; every value is a parameter.
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "  # noqa: S608
        f"VALUES ({', '.join(['%s'] * len(fields))}) "
        + ("ON CONFLICT DO NOTHING " if unless_taken else "")
        + f"RETURNING {quote(meta.pk.column)}"
    )
    params = [f.get_db_prep_save(f.pre_save(obj, True), connection) for f in fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return False
    obj.pk = row[0]
    obj._state.adding, obj._state.db = False, connection.alias
    return True


def update(obj: Model) -> None:
    """UPDATE every column of the saved row `obj`, as obj.save() does."""
    model = type(obj)
    connection = connections[router.db_for_write(model)]
    quote = connection.ops.quote_name
    meta = model._meta
    fields: Sequence = _columns(model)
    assignments = ", ".join(f"{quote(f.column)} = %s" for f in fields)
    sql = f"UPDATE {quote(meta.db_table)} SET {assignments} WHERE {quote(meta.pk.column)} = %s"  # noqa: S608
    params = [f.get_db_prep_save(f.pre_save(obj, False), connection) for f in fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, obj.pk])


def insert_with(obj: Model, child: Model, link: str, *, unless_taken: bool = False) -> bool:
    """insert(obj), then `child` pointing at it through its foreign key `link`.

    On PostgreSQL both go in one statement (a data-modifying WITH): one round trip
    fewer for every new node. With `unless_taken` neither goes in when `obj` conflicts
    (False). Other databases have no such statement: two inserts, as before.
    """
    model, child_model = type(obj), type(child)
    connection = connections[router.db_for_write(model)]
    fk = child_model._meta.get_field(link)
    if connection.vendor != "postgresql":
        if not insert(obj, unless_taken=unless_taken):
            return False
        setattr(child, link, obj)
        insert(child)
        return True
    quote = connection.ops.quote_name
    parent_fields = _columns(model)
    child_fields = [f for f in _columns(child_model) if f is not fk]
    parent_pk, child_pk = quote(model._meta.pk.column), quote(child_model._meta.pk.column)
    # Only the models' own (quoted) names are formatted in; every value is a parameter.
    sql = (
        f"WITH parent AS (INSERT INTO {quote(model._meta.db_table)} "  # noqa: S608
        f"({', '.join(quote(f.column) for f in parent_fields)}) "
        f"VALUES ({', '.join(['%s'] * len(parent_fields))}) "
        + ("ON CONFLICT DO NOTHING " if unless_taken else "")
        + f"RETURNING {parent_pk}) "  # noqa: S608
        f"INSERT INTO {quote(child_model._meta.db_table)} "
        f"({quote(fk.column)}, {', '.join(quote(f.column) for f in child_fields)}) "
        f"SELECT parent.{parent_pk}, {', '.join(['%s'] * len(child_fields))} FROM parent "
        f"RETURNING {quote(fk.column)}, {child_pk}"
    )
    params = [f.get_db_prep_save(f.pre_save(obj, True), connection) for f in parent_fields]
    params += [f.get_db_prep_save(f.pre_save(child, True), connection) for f in child_fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return False
    obj.pk, child.pk = row
    for saved in (obj, child):
        saved._state.adding, saved._state.db = False, connection.alias
    setattr(child, link, obj)
    return True
