"""Names without bidirectional controls: the engine now refuses a name with one (smdengine._spec_base.BIDI_CONTROLS: a
right-to-left override shows "run-\u202egpj.exe" as "run-exe.jpg"), and re-reads the stored spec of every job
it runs, continues or draws, so a name stored before would fail its job. Each such character of a stored name,
experiment or study, in its row and in its spec (a study's base too), is removed (they draw nothing), the ends
trimmed. As 0013 did for control characters. A checkpoint's fingerprint hashes its spec, name included: a
renamed job's checkpoints are dropped (one could no longer be resumed or continued from; the job's next
attempt starts from step 0, as it would have after refusing it).

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-28
"""
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

# as of this revision (a migration keeps its own copy: the engine's set may grow)
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _clean(name: Any) -> Any:
    if not isinstance(name, str) or not any(ch in BIDI_CONTROLS for ch in name):
        return name
    return "".join(ch for ch in name if ch not in BIDI_CONTROLS).strip() or None


def _clean_spec(spec: Any) -> Any:
    if not isinstance(spec, dict):
        return spec
    out = {**spec, "name": _clean(spec["name"])} if "name" in spec else dict(spec)
    if isinstance(out.get("base"), dict) and "name" in out["base"]:
        out["base"] = {**out["base"], "name": _clean(out["base"]["name"])}
    return out


def upgrade() -> None:
    bind = op.get_bind()
    for table_name in ("experiments", "studies"):
        table = sa.table(table_name, sa.column("id", sa.String), sa.column("name", sa.String),
                         sa.column("spec", sa.JSON))
        changed = []   # read a few hundred rows at a time, written after: only the few that change are held
        rows = bind.execute(sa.select(table.c.id, table.c.name, table.c.spec).execution_options(yield_per=500))
        for row_id, name, spec in rows:
            cleaned, cleaned_spec = _clean(name), _clean_spec(spec)
            if cleaned != name or cleaned_spec != spec:
                changed.append((row_id, cleaned, cleaned_spec))
        for row_id, cleaned, cleaned_spec in changed:
            bind.execute(table.update().where(table.c.id == row_id).values(name=cleaned, spec=cleaned_spec))
        if table_name == "experiments":
            checkpoints = sa.table("checkpoints", sa.column("experiment_id", sa.String))
            renamed = [row_id for row_id, _, _ in changed]
            for i in range(0, len(renamed), 500):
                bind.execute(checkpoints.delete().where(checkpoints.c.experiment_id.in_(renamed[i:i + 500])))


def downgrade() -> None:
    pass   # the characters are gone; the names stay valid under the older code too
