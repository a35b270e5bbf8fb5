"""Conversation history in SQLite (WAL, foreign keys, explicit numbered migrations).

Everything the user typed or the model generated is written here as it happens: the user
message before the request leaves, the assistant text while it streams. A crash of the worker
or of the app loses nothing that was on screen.

Timestamps are Unix seconds (float). Images are stored as their original file bytes.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from engine.paths import data_dir

# Each entry upgrades the schema by one version; never edit a released entry, append a new one.
MIGRATIONS: list[str] = [
    # 1: conversations, messages (with reasoning text and timings), attachments, daily energy
    """
    CREATE TABLE conversations (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        title TEXT NOT NULL DEFAULT '',
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY AUTOINCREMENT,     -- never reuse ids: views key widgets by id
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
        content TEXT NOT NULL DEFAULT '',
        reasoning TEXT NOT NULL DEFAULT '',
        created_at REAL NOT NULL,
        reasoning_started_at REAL,
        reasoning_ended_at REAL,
        finished_at REAL,
        status TEXT NOT NULL DEFAULT 'done',       -- 'streaming' | 'done' | 'cancelled' | 'error' | 'interrupted'
        error TEXT NOT NULL DEFAULT '',
        model TEXT NOT NULL DEFAULT '',
        prompt_tokens INTEGER,
        completion_tokens INTEGER,
        ttft_s REAL,
        prefill_tok_s REAL,
        decode_tok_s REAL,
        spec_accept_rate REAL,
        energy_j REAL
    );
    CREATE INDEX messages_by_conversation ON messages(conversation_id, id);
    CREATE TABLE attachments (
        id INTEGER PRIMARY KEY,
        message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        mime TEXT NOT NULL,
        width INTEGER NOT NULL,
        height INTEGER NOT NULL,
        data BLOB NOT NULL
    );
    CREATE TABLE energy_daily (
        day TEXT PRIMARY KEY,                      -- local date, YYYY-MM-DD
        joules REAL NOT NULL DEFAULT 0,
        tokens INTEGER NOT NULL DEFAULT 0
    );
    """,
    # 2: how many of a reply's prompt tokens were resumed from the previous turn instead of prefilled again
    """
    ALTER TABLE messages ADD COLUMN cached_tokens INTEGER;
    """,
]


@dataclass
class Attachment:
    name: str
    mime: str
    width: int
    height: int
    data: bytes
    id: int | None = None


@dataclass
class Message:
    id: int
    conversation_id: int
    role: str
    content: str = ""
    reasoning: str = ""
    created_at: float = 0.0
    reasoning_started_at: float | None = None
    reasoning_ended_at: float | None = None
    finished_at: float | None = None
    status: str = "done"
    error: str = ""
    model: str = ""
    prompt_tokens: int | None = None
    cached_tokens: int | None = None      # of the prompt tokens, those resumed from the previous turn's state
    completion_tokens: int | None = None
    ttft_s: float | None = None
    prefill_tok_s: float | None = None
    decode_tok_s: float | None = None
    spec_accept_rate: float | None = None
    energy_j: float | None = None
    attachments: list[Attachment] = field(default_factory=list)

    @property
    def thinking_seconds(self) -> float | None:
        if self.reasoning_started_at is None:
            return None
        end = self.reasoning_ended_at or self.finished_at or time.time()
        return max(0.0, end - self.reasoning_started_at)


@dataclass
class Conversation:
    id: int
    title: str
    created_at: float
    updated_at: float


_MESSAGE_COLUMNS = [f for f in Message.__dataclass_fields__ if f != "attachments"]
_UPDATABLE = set(_MESSAGE_COLUMNS) - {"id", "conversation_id", "role", "created_at"}


def default_db_path() -> Path:
    return data_dir() / "history.sqlite3"


def _is_damage(exc: sqlite3.DatabaseError) -> bool:
    """SQLITE_CORRUPT or SQLITE_NOTADB: the file's content is unusable (not a locked, read-only or full disk)."""
    code = getattr(exc, "sqlite_errorcode", None)   # Python 3.11+
    if code is not None:
        return code & 0xFF in (11, 26)
    text = str(exc).lower()
    return "not a database" in text or "malformed" in text


class StoreError(RuntimeError):
    """The history file cannot be used by this version (written by a newer Monorail)."""


class Store:
    """The history database. A file SQLite cannot read ("not a database", a malformed image) is not deleted: it
    is renamed to ``<name>.damaged-<time>`` beside itself, with its -wal / -shm files, and a fresh history is
    started; ``set_aside`` then names the kept file so the app can tell the user where it is."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path else default_db_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.set_aside: Path | None = None
        self.set_aside_reason = ""
        try:
            self._open()
        except sqlite3.DatabaseError as exc:
            if not _is_damage(exc):   # locked, read-only, no space: the file is fine, so say so and touch nothing
                raise
            # move first, close after: closing the last connection deletes the -wal file, whose pages may be the
            # newest part of the history
            self.set_aside, self.set_aside_reason = self._move_aside(), str(exc)
            self.db.close()
            self._open()

    def _open(self) -> None:
        self.db = sqlite3.connect(self.path, isolation_level=None)   # autocommit; explicit transactions below
        self.db.row_factory = sqlite3.Row
        self._refuse_newer_schema()   # before anything writes: a newer Monorail's file is left byte for byte
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA foreign_keys=ON")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self._migrate()
        self.db.execute("SELECT COUNT(*) FROM conversations").fetchone()   # the main table must be readable

    def _move_aside(self) -> Path:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        kept = self.path.with_name(f"{self.path.name}.damaged-{stamp}")
        n = 1
        while kept.exists():
            n += 1
            kept = self.path.with_name(f"{self.path.name}.damaged-{stamp}-{n}")
        for suffix in ("-wal", "-shm"):
            side = self.path.with_name(self.path.name + suffix)
            if side.exists():
                side.replace(kept.with_name(kept.name + suffix))
        self.path.replace(kept)
        return kept

    # -- schema ---------------------------------------------------------------
    @property
    def schema_version(self) -> int:
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def _refuse_newer_schema(self) -> None:
        current = self.schema_version
        if current > len(MIGRATIONS):
            raise StoreError(f"{self.path} was written by a newer Monorail (schema {current}); "
                             f"this version understands up to {len(MIGRATIONS)}. Update Monorail.")

    def _migrate(self) -> None:
        current = self.schema_version
        for version in range(current + 1, len(MIGRATIONS) + 1):
            self.db.executescript("BEGIN;" + MIGRATIONS[version - 1] + f"; PRAGMA user_version={version}; COMMIT;")

    def close(self) -> None:
        self.db.close()

    # -- conversations ----------------------------------------------------------
    def create_conversation(self, title: str = "") -> Conversation:
        now = time.time()
        cur = self.db.execute("INSERT INTO conversations(title, created_at, updated_at) VALUES (?,?,?)",
                              (title, now, now))
        return Conversation(cur.lastrowid, title, now, now)

    def conversation(self, conversation_id: int) -> Conversation | None:
        row = self.db.execute("SELECT * FROM conversations WHERE id=?", (conversation_id,)).fetchone()
        return Conversation(**dict(row)) if row else None

    def conversations(self, query: str = "") -> list[Conversation]:
        """Newest first; ``query`` matches titles and the text of any message (case-insensitive)."""
        if not query.strip():
            rows = self.db.execute("SELECT * FROM conversations ORDER BY updated_at DESC, id DESC")
        else:
            like = "%" + query.strip().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            rows = self.db.execute(
                "SELECT * FROM conversations c WHERE c.title LIKE ? ESCAPE '\\' OR EXISTS ("
                " SELECT 1 FROM messages m WHERE m.conversation_id = c.id AND"
                " (m.content LIKE ? ESCAPE '\\' OR m.reasoning LIKE ? ESCAPE '\\'))"
                " ORDER BY updated_at DESC, id DESC", (like, like, like))
        return [Conversation(**dict(r)) for r in rows]

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        self.db.execute("UPDATE conversations SET title=?, updated_at=? WHERE id=?", (title, time.time(), conversation_id))

    def delete_conversation(self, conversation_id: int) -> None:
        self.db.execute("DELETE FROM conversations WHERE id=?", (conversation_id,))

    def _touch(self, conversation_id: int) -> None:
        self.db.execute("UPDATE conversations SET updated_at=? WHERE id=?", (time.time(), conversation_id))

    # -- messages ---------------------------------------------------------------
    def add_message(self, conversation_id: int, role: str, content: str = "", *,
                    attachments: list[Attachment] = (), status: str = "done", model: str = "") -> Message:
        now = time.time()
        self.db.execute("BEGIN")
        try:
            cur = self.db.execute(
                "INSERT INTO messages(conversation_id, role, content, created_at, status, model) VALUES (?,?,?,?,?,?)",
                (conversation_id, role, content, now, status, model))
            mid = cur.lastrowid
            for a in attachments:
                a.id = self.db.execute(
                    "INSERT INTO attachments(message_id, name, mime, width, height, data) VALUES (?,?,?,?,?,?)",
                    (mid, a.name, a.mime, a.width, a.height, sqlite3.Binary(a.data))).lastrowid
            self._touch(conversation_id)
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return Message(id=mid, conversation_id=conversation_id, role=role, content=content, created_at=now,
                       status=status, model=model, attachments=list(attachments))

    def update_message(self, message_id: int, **values) -> None:
        bad = set(values) - _UPDATABLE
        if bad:
            raise ValueError(f"cannot update message fields {sorted(bad)}")
        if not values:
            return
        cols = ", ".join(f"{k}=?" for k in values)
        self.db.execute(f"UPDATE messages SET {cols} WHERE id=?", (*values.values(), message_id))

    def messages(self, conversation_id: int) -> list[Message]:
        rows = self.db.execute(f"SELECT {', '.join(_MESSAGE_COLUMNS)} FROM messages WHERE conversation_id=? ORDER BY id",
                               (conversation_id,)).fetchall()
        out = [Message(**dict(r)) for r in rows]
        by_id = {m.id: m for m in out}
        if by_id:
            marks = ",".join("?" * len(by_id))
            for r in self.db.execute(f"SELECT * FROM attachments WHERE message_id IN ({marks}) ORDER BY id",
                                     tuple(by_id)):
                by_id[r["message_id"]].attachments.append(
                    Attachment(r["name"], r["mime"], r["width"], r["height"], bytes(r["data"]), r["id"]))
        return out

    def message(self, message_id: int) -> Message | None:
        row = self.db.execute("SELECT conversation_id FROM messages WHERE id=?", (message_id,)).fetchone()
        if not row:
            return None
        return next(m for m in self.messages(row[0]) if m.id == message_id)

    def delete_messages_from(self, conversation_id: int, message_id: int) -> None:
        """Delete a message and everything after it (regenerate, edit and resend)."""
        self.db.execute("DELETE FROM messages WHERE conversation_id=? AND id>=?", (conversation_id, message_id))
        self._touch(conversation_id)

    def mark_interrupted(self) -> int:
        """At start-up: replies left 'streaming' by a crash become 'interrupted' (their text is kept)."""
        return self.db.execute("UPDATE messages SET status='interrupted' WHERE status='streaming'").rowcount

    # -- energy -----------------------------------------------------------------
    def add_energy(self, joules: float, tokens: int = 0, day: date | None = None) -> None:
        key = (day or date.today()).isoformat()
        self.db.execute("INSERT INTO energy_daily(day, joules, tokens) VALUES (?,?,?) ON CONFLICT(day) DO UPDATE"
                        " SET joules = joules + excluded.joules, tokens = tokens + excluded.tokens",
                        (key, float(joules), int(tokens)))

    def energy_day(self, day: date | None = None) -> float:
        row = self.db.execute("SELECT joules FROM energy_daily WHERE day=?", ((day or date.today()).isoformat(),)).fetchone()
        return float(row[0]) if row else 0.0

    def energy_month(self, day: date | None = None) -> float:
        prefix = (day or date.today()).strftime("%Y-%m-")
        row = self.db.execute("SELECT SUM(joules) FROM energy_daily WHERE day LIKE ?", (prefix + "%",)).fetchone()
        return float(row[0] or 0.0)

    def energy_days(self, limit: int = 31) -> list[tuple[str, float, int]]:
        rows = self.db.execute("SELECT day, joules, tokens FROM energy_daily ORDER BY day DESC LIMIT ?", (limit,))
        return [(r[0], float(r[1]), int(r[2])) for r in rows]

    # -- export -----------------------------------------------------------------
    def export_json(self, conversation_id: int) -> str:
        conv = self.conversation(conversation_id)
        if conv is None:
            raise KeyError(f"conversation {conversation_id} does not exist")
        msgs = []
        for m in self.messages(conversation_id):
            d = {k: getattr(m, k) for k in _MESSAGE_COLUMNS if k not in ("id", "conversation_id")}
            d["attachments"] = [{"name": a.name, "mime": a.mime, "width": a.width, "height": a.height,
                                 "bytes": len(a.data)} for a in m.attachments]
            msgs.append(d)
        return json.dumps({"format": "monorail-conversation", "version": 1, "title": conv.title,
                           "created_at": conv.created_at, "messages": msgs}, indent=2, ensure_ascii=False)

    def export_markdown(self, conversation_id: int) -> str:
        conv = self.conversation(conversation_id)
        if conv is None:
            raise KeyError(f"conversation {conversation_id} does not exist")
        lines = [f"# {conv.title or 'Conversation'}", ""]
        for m in self.messages(conversation_id):
            lines.append(f"## {m.role.capitalize()}")
            lines.append("")
            for a in m.attachments:
                lines.append(f"*[image: {a.name}, {a.width}x{a.height}]*")
            if m.reasoning:
                lines += ["<details><summary>Thinking</summary>", "", m.reasoning, "", "</details>", ""]
            lines += [m.content, ""]
        return "\n".join(lines)
