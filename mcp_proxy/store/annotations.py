"""What people write about a recording: tags and notes on a session or on one frame.

Annotations are the only rows a reader writes (the recorder owns frames, sessions and
findings), so their writes live here beside their reads rather than in the recorder's
``writes`` module.
"""

from __future__ import annotations

import time
from typing import cast

import sqlalchemy as sa

from mcp_proxy.errors import BadValueError, NotFoundError
from mcp_proxy.limits import NOTE_MAX
from mcp_proxy.store.base import StoreBase
from mcp_proxy.store.filters import TAG_RE
from mcp_proxy.store.rows import AnnotationRow
from mcp_proxy.store.schema import annotations as notes_table
from mcp_proxy.store.schema import frames


class AnnotationQueries(StoreBase):
    """Annotation reads and writes (mixed into :class:`~mcp_proxy.store.queries.Store`)."""

    async def annotations_for(
        self, session_id: str, frame_seqs: list[int] | None = None
    ) -> list[AnnotationRow]:
        """A session's annotations: all of them, or those on the session and the given frames."""
        stmt = sa.select(notes_table).where(notes_table.c.session_id == session_id)
        if frame_seqs is not None:
            stmt = stmt.where(
                sa.or_(notes_table.c.frame_seq.is_(None), notes_table.c.frame_seq.in_(frame_seqs))
            )
        return cast(list[AnnotationRow], await self._all(stmt.order_by(notes_table.c.id)))

    async def annotation(self, annotation_id: int) -> AnnotationRow:
        row = await self._one(sa.select(notes_table).where(notes_table.c.id == annotation_id))
        if row is None:
            raise NotFoundError(f"no annotation {annotation_id}")
        return cast(AnnotationRow, row)

    async def add_annotation(
        self, session_id: str, *, frame_seq: int | None, tag: str | None, note: str | None
    ) -> AnnotationRow:
        tag, note = clean_annotation(tag, note)
        if frame_seq is not None:
            exists = await self._scalar(
                sa.select(frames.c.id).where(
                    frames.c.session_id == session_id, frames.c.seq == frame_seq
                )
            )
            if exists is None:
                raise NotFoundError(f"no frame #{frame_seq} in this session")
        res = await self._write(
            notes_table.insert().values(
                session_id=session_id,
                frame_seq=frame_seq,
                tag=tag,
                note=note,
                created_at=time.time(),
                updated_at=None,
            )
        )
        return await self.annotation(int(res.inserted_primary_key[0]))

    async def update_annotation(
        self, annotation_id: int, *, tag: str | None, note: str | None
    ) -> AnnotationRow:
        current = await self.annotation(annotation_id)
        # An annotation keeps its nature: a tag stays a tag, a note a note.
        if current["tag"] is not None:
            tag, note = clean_annotation(tag, None)
        else:
            tag, note = clean_annotation(None, note)
        await self._write(
            notes_table.update()
            .where(notes_table.c.id == annotation_id)
            .values(tag=tag, note=note, updated_at=time.time())
        )
        return await self.annotation(annotation_id)

    async def delete_annotation(self, annotation_id: int) -> AnnotationRow:
        current = await self.annotation(annotation_id)
        await self._write(notes_table.delete().where(notes_table.c.id == annotation_id))
        return current


def clean_annotation(tag: str | None, note: str | None) -> tuple[str | None, str | None]:
    """Validate a tag (short, lower-case label) or a note (free text); exactly one of them."""
    tag = (tag or "").strip().lower() or None
    note = (note or "").strip() or None
    if (tag is None) == (note is None):
        raise BadValueError("give either a tag or a note")
    if tag is not None and not TAG_RE.match(tag):
        raise BadValueError(
            "a tag is 1-64 characters: letters, digits and . _ : / - (e.g. bug-repro)"
        )
    if note is not None and len(note) > NOTE_MAX:
        raise BadValueError(f"a note is at most {NOTE_MAX} characters")
    return tag, note
