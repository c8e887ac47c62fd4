"""HTTP relay: mark frames whose stored bytes are a redacted copy.

A frame's ``raw`` is normally the exact wire bytes. When redaction replaced a credential in a
JSON body, the stored ``raw`` is the re-serialised redacted document instead; ``redacted`` says
so, so that nobody mistakes it for what crossed the wire (replay, byte-exact export, diffs).
Nullable: every frame recorded before this revision is simply "not known to be redacted".

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN (nullable, no default) is supported by SQLite and PostgreSQL alike and,
    # unlike batch mode, does not copy the frames table.
    op.add_column("frames", sa.Column("redacted", sa.Boolean, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("frames") as batch:
        batch.drop_column("redacted")
