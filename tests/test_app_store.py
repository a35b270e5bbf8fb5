"""The SQLite history: schema migrations, WAL, cascades, search, energy totals, export."""

from __future__ import annotations

import json
import sqlite3
from datetime import date

import pytest

from app.store import MIGRATIONS, Attachment, Store


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "h.sqlite3")
    yield s
    s.close()


def test_fresh_database_is_migrated_with_wal_and_foreign_keys(store):
    assert store.schema_version == len(MIGRATIONS)
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.db.execute("PRAGMA foreign_keys").fetchone()[0] == 1


def test_a_version_1_history_gains_the_resumed_token_column_and_keeps_its_messages(tmp_path):
    path = tmp_path / "old.sqlite3"
    con = sqlite3.connect(path)
    con.executescript("BEGIN;" + MIGRATIONS[0] + "; PRAGMA user_version=1; COMMIT;")
    con.execute("INSERT INTO conversations(title, created_at, updated_at) VALUES ('old', 1, 1)")
    con.execute("INSERT INTO messages(conversation_id, role, content, created_at, prompt_tokens) "
                "VALUES (1, 'assistant', 'kept', 2, 99)")
    con.commit()
    con.close()
    s = Store(path)
    try:
        assert s.schema_version == len(MIGRATIONS) >= 2
        (m,) = s.messages(1)
        assert (m.content, m.prompt_tokens, m.cached_tokens) == ("kept", 99, None)
        s.update_message(m.id, cached_tokens=80)
        assert s.messages(1)[0].cached_tokens == 80
    finally:
        s.close()


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "future.sqlite3"
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA user_version={len(MIGRATIONS) + 1}")
    con.close()
    with pytest.raises(RuntimeError, match="newer Monorail"):
        Store(path)


def test_delete_conversation_cascades_to_messages_and_images(store):
    c = store.create_conversation("t")
    store.add_message(c.id, "user", "hi", attachments=[Attachment("a.png", "image/png", 2, 2, b"\x89PNG")])
    store.delete_conversation(c.id)
    assert store.db.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 0
    assert store.db.execute("SELECT COUNT(*) FROM attachments").fetchone()[0] == 0


def test_search_matches_titles_and_message_text_case_insensitively(store):
    a = store.create_conversation("Rust lifetimes")
    b = store.create_conversation("Dinner")
    store.add_message(b.id, "assistant", "Try a RISOTTO with 100% arborio")
    assert [c.id for c in store.conversations("rust")] == [a.id]
    assert [c.id for c in store.conversations("risotto")] == [b.id]
    assert [c.id for c in store.conversations("100%")] == [b.id]
    assert store.conversations("nothing like this") == []
    assert len(store.conversations("")) == 2


def test_energy_daily_totals_persist(tmp_path):
    s = Store(tmp_path / "e.sqlite3")
    s.add_energy(3.6e6, 10, day=date(2026, 5, 1))
    s.add_energy(1.8e6, 5, day=date(2026, 5, 1))
    s.add_energy(1.0e6, 0, day=date(2026, 5, 2))
    s.add_energy(9.9e6, 0, day=date(2026, 4, 30))
    s.close()
    s = Store(tmp_path / "e.sqlite3")
    assert s.energy_day(date(2026, 5, 1)) == pytest.approx(5.4e6)
    assert s.energy_month(date(2026, 5, 20)) == pytest.approx(6.4e6)
    assert s.energy_days()[0] == ("2026-05-02", 1.0e6, 0)
    s.close()


def test_exports(store):
    c = store.create_conversation("Export me")
    store.add_message(c.id, "user", "question", attachments=[Attachment("p.png", "image/png", 3, 4, b"xx")])
    m = store.add_message(c.id, "assistant", "answer")
    store.update_message(m.id, reasoning="because", completion_tokens=2)
    md = store.export_markdown(c.id)
    assert md.startswith("# Export me") and "question" in md and "because" in md and "p.png, 3x4" in md
    data = json.loads(store.export_json(c.id))
    assert data["title"] == "Export me" and [x["role"] for x in data["messages"]] == ["user", "assistant"]
    assert data["messages"][1]["reasoning"] == "because" and data["messages"][0]["attachments"][0]["bytes"] == 2


def test_update_refuses_unknown_fields(store):
    c = store.create_conversation()
    m = store.add_message(c.id, "user", "x")
    with pytest.raises(ValueError, match="cannot update"):
        store.update_message(m.id, role="assistant")


def test_a_damaged_history_file_is_kept_aside_and_a_fresh_one_started(tmp_path):
    path = tmp_path / "history.sqlite3"
    s = Store(path)
    s.create_conversation("before the damage")
    s.close()
    data = bytearray(path.read_bytes())
    data[:100] = b"\x00garbage" * 12 + b"gone"       # the SQLite header: the file no longer reads as a database
    path.write_bytes(bytes(data))
    (tmp_path / "history.sqlite3-wal").write_bytes(b"wal bytes")
    fresh = Store(path)
    assert fresh.set_aside is not None and fresh.set_aside.read_bytes() == bytes(data)   # kept byte for byte
    assert fresh.set_aside.name.startswith("history.sqlite3.damaged-")
    assert (tmp_path / (fresh.set_aside.name + "-wal")).read_bytes() == b"wal bytes"
    assert "not a database" in fresh.set_aside_reason
    assert fresh.conversations() == [] and fresh.create_conversation("after").id == 1
    fresh.close()
    again = Store(path)                                # the fresh file is healthy: nothing more is set aside
    assert again.set_aside is None and [c.title for c in again.conversations()] == ["after"]
    again.close()


def test_a_locked_history_is_refused_not_set_aside(tmp_path):
    """A lock (another Monorail writing) is not damage: the file must stay where it is."""
    path = tmp_path / "history.sqlite3"
    Store(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA journal_mode=DELETE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            Store(path)
        assert sorted(p.name for p in tmp_path.iterdir() if "damaged" in p.name) == []
    finally:
        holder.execute("ROLLBACK")
        holder.close()
