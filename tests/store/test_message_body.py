"""``messages.body``, the message as one value that the history read fetches: after every writer
of a message or its parts (save, admit, incremental checkpoints, an image marked omitted, fork,
``ponder store copy``) the body and the columns and ``parts`` rows read the same message, on
every backend; a message without a body (written before the column existed) reads as before."""

from pathlib import Path

import msgspec
import pytest

from daemon.conversation import ChatMessage, Part
from daemon.store import Store, new_lease_owner
from daemon.store.copy import copy_sessions
from daemon.store.migrations import MIGRATIONS, migrate
from daemon.store.store import StoreQueries
from protocol.objects import Usage
from tests.store.test_store import every_part_message, raw, rows, session, text_message

IMAGE = Part(type="image", attachment_id="b" * 64, mime_type="image/png", size=3, width=2, height=1, data=b"png")


def with_everything(message_id: str, seq: int, session_id: str = "s1") -> ChatMessage:
    """Every field a message and its parts can carry, NUL and the PostgreSQL escape character included."""
    message = every_part_message(message_id, session_id, seq)
    message.parts = [
        *message.parts,
        IMAGE,
        Part(type="resource", uri="file:///a\x00.txt", mime_type="text/plain", text="x\uffff0\x00", truncated=True),
        Part(type="resource_link", uri="https://example.com/r", name="r", mime_type="text/html"),
    ]
    message.origin = "prompt"
    message.turn_id = "turn_1"
    message.client_message_id = f"client-{message_id}"
    message.admission = {"queued": False, "position": 0}
    message.output = {"schema": {"type": "object"}, "retries": 2, "max_turns": None}
    return message


def bodies(store: StoreQueries, session_id: str = "s1") -> dict[str, bytes | None]:
    found = rows(store, "SELECT id, body FROM messages WHERE session_id = ? ORDER BY seq", (session_id,))
    return {str(message_id): None if body is None else bytes(body) for message_id, body in found}  # type: ignore[arg-type]


def assert_body_agrees(store: StoreQueries, session_id: str = "s1") -> list[ChatMessage]:
    """The history as read (bodies where there are) equals the history read from the columns and
    parts rows alone (every body cleared, as before m012); the bodies are put back after."""
    kept = bodies(store, session_id)
    read = store.get_messages(session_id)
    store._write(lambda db: db.execute("UPDATE messages SET body = NULL WHERE session_id = ?", (session_id,)))
    try:
        assert store.get_messages(session_id) == read
        # Pages too: a page's bodies and its appended text are the page's own.
        for after in range(len(read)):
            assert store.get_messages(session_id, after_seq=read[after].seq - 1, limit=2) == read[after : after + 2]
    finally:
        store._write(
            lambda db: db.executemany(
                "UPDATE messages SET body = ? WHERE id = ?", [(body, mid) for mid, body in kept.items()]
            )
        )
    assert bodies(store, session_id) == kept
    return read


def test_a_saved_message_reads_the_same_from_its_body_and_from_its_rows(store: StoreQueries) -> None:
    store.create_session(session())
    first = with_everything("m1", 1)
    assert store.save_message(first) == msgspec.structs.replace(
        first, parts=[msgspec.structs.replace(p, data=None) for p in first.parts]
    )
    store.save_message(text_message("m2", 2, text="nul\x00 and \uffff0"))
    # Saved again (a checkpoint, then the final save): the body follows the new parts.
    second = every_part_message("m2", seq=2)
    second.created_at = ""  # keeps the first save's
    store.save_message(second)
    # A part of a kind without media does not keep media fields (its rows cannot hold them).
    odd = text_message("m3", 3)
    odd.parts = [Part(type="text", text="t", mime_type="text/plain", size=4, truncated=True)]
    assert store.save_message(odd).parts == [Part(type="text", text="t")]

    assert all(body is not None for body in bodies(store).values())
    read = assert_body_agrees(store)
    assert read[0].parts[0].text.endswith("nul\x00 end")
    assert (read[0].client_message_id, read[0].admission, read[0].output) == (
        first.client_message_id,
        first.admission,
        first.output,
    )
    assert [p.data for p in read[0].parts] == [None] * len(first.parts)
    assert read[1].parts == second.parts and read[1].created_at != ""
    assert read[2].parts == [Part(type="text", text="t")]


def test_admit_writes_the_body(store: StoreQueries) -> None:
    store.create_session(session())
    admitted = store.admit(with_everything("m1", 1), new_lease_owner(), 60.0, 0)
    assert admitted.saved
    assert bodies(store)["m1"] is not None
    assert assert_body_agrees(store)[0].client_message_id == "client-m1"


def test_checkpoints_clear_the_body_and_the_last_one_writes_it_again(store: StoreQueries) -> None:
    store.create_session(session())
    reply = ChatMessage(
        message_id="m1",
        session_id="s1",
        seq=1,
        role="assistant",
        parts=[Part(type="thinking", text="hm", signature="sig\x00"), Part(type="text", text="He")],
        status="interrupted",
    )
    store.save_message(reply)
    # Text alone goes to part_appends: the parts rows, hence the body, stay as they were.
    store.append_to_message("m1", {}, {1: "llo"})
    assert bodies(store)["m1"] is not None
    assert assert_body_agrees(store)[0].parts[1].text == "Hello"
    # A part written whole (a new one, and one whose fields changed with its text kept).
    call = Part(type="tool_call", call_id="c1", name="read", arguments={"path": "a\x00"}, provider_data={"n": 1.5})
    thought = Part(type="thinking", text="hm", signature="sig\x00", provider="anthropic", model="claude")
    store.append_to_message("m1", {0: thought, 2: call}, {0: " more"}, keep_text=frozenset({0}))
    assert bodies(store)["m1"] is None
    assert [p.text for p in assert_body_agrees(store)[0].parts] == ["hm more", "Hello", ""]
    # The last checkpoint: the reply is whole and its body is back, with its status and usage.
    final = msgspec.structs.replace(reply, status="complete", stop_reason="tool_use", usage=Usage(input_tokens=3))
    store.append_to_message("m1", {1: Part(type="text", text="Hello")}, {1: "!"}, keep_text=frozenset({1}), final=final)
    assert bodies(store)["m1"] is not None
    [read] = assert_body_agrees(store)
    assert (read.status, read.stop_reason, read.usage) == ("complete", "tool_use", Usage(input_tokens=3))
    assert read.parts == [msgspec.structs.replace(thought, text="hm more"), Part(type="text", text="Hello!"), call]


def test_an_image_marked_omitted_is_omitted_in_the_body(store: StoreQueries) -> None:
    store.create_session(session())
    store.save_message(with_everything("m1", 1))
    position = next(i for i, p in enumerate(with_everything("m1", 1).parts) if p.type == "image")
    store.mark_image_omitted("m1", position, "too large for the provider")
    assert bodies(store)["m1"] is not None
    [read] = assert_body_agrees(store)
    assert read.parts[position].omitted == "too large for the provider"


def test_a_fork_copies_the_bodies_under_its_own_ids(store: StoreQueries) -> None:
    store.create_session(session("src"))
    for seq in (1, 2, 3):
        store.save_message(with_everything(f"m{seq}", seq, "src"))
    store.append_to_message("m2", {}, {0: " appended"})
    store.fork_session("src", session("f1"))
    forked = bodies(store, "f1")
    assert len(forked) == 3 and all(body is not None for body in forked.values())
    read = assert_body_agrees(store, "f1")
    source = store.get_messages("src")
    assert [m.session_id for m in read] == ["f1"] * 3
    assert [m.parts for m in read] == [m.parts for m in source]
    assert read[1].parts[0].text.endswith(" appended")
    # A fork does not copy a prompt's idempotency key and first answer, body or not.
    assert [(m.client_message_id, m.admission, m.output) for m in read] == [(None, None, None)] * 3


def test_a_message_without_a_body_reads_as_before_beside_those_with(store: StoreQueries) -> None:
    store.create_session(session())
    for seq in range(1, 7):
        store.save_message(with_everything(f"m{seq}", seq) if seq % 2 else text_message(f"m{seq}", seq))
    store.append_to_message("m3", {}, {1: " (and)"})
    expected = store.get_messages("s1")
    # Some rows as a store before m012 has them: interleaved with rows that have a body.
    store._write(lambda db: db.execute("UPDATE messages SET body = NULL WHERE seq IN (2, 3, 6)"))
    assert [body is None for body in bodies(store).values()] == [False, True, True, False, False, True]
    assert store.get_messages("s1") == expected
    assert store.get_messages("s1", after_seq=2, limit=3) == expected[2:5]
    assert_body_agrees(store)


def test_rows_written_before_the_migration_read_as_they_did(db_path: Path) -> None:
    db_path.parent.mkdir()
    # A file at the schema before m012, with a message written by SQL as that ponder wrote it.
    conn = raw(db_path)
    try:
        migrate(conn, MIGRATIONS[:11])
        conn.execute(
            "INSERT INTO sessions (id, cwd, model_id, thinking_level, approval_policy, created_at, updated_at) "
            "VALUES ('s1', '/w', 'mock/echo', 'off', 'ask', 'x', 'x')"
        )
        conn.execute(
            "INSERT INTO messages (id, session_id, seq, role, status, created_at, usage_json) "
            "VALUES ('m1', 's1', 1, 'assistant', 'complete', '2025-01-01', '{\"input_tokens\":4}')"
        )
        conn.execute(
            "INSERT INTO parts (message_id, position, type, text, signature, provider_data_json) "
            "VALUES ('m1', 0, 'thinking', 'old', 'sig', '{\"a\":[1,2]}'), ('m1', 1, 'text', 'answer', NULL, NULL)"
        )
    finally:
        conn.close()
    with Store(db_path) as store:
        assert bodies(store) == {"m1": None}
        [read] = store.get_messages("s1")
        assert read.usage == Usage(input_tokens=4)
        assert read.parts == [
            Part(type="thinking", text="old", signature="sig", provider_data={"a": [1, 2]}),
            Part(type="text", text="answer"),
        ]
        # Saved again by this ponder, it has a body that reads the same.
        store.save_message(read)
        assert bodies(store)["m1"] is not None
        assert store.get_messages("s1") == [read]


def test_store_copy_carries_the_bodies(tmp_path: Path, postgres_url: str) -> None:
    with Store(tmp_path / "sessions.db") as home:
        home.create_session(session("a"))
        for seq in (1, 2):
            home.save_message(with_everything(f"a{seq}", seq, "a"))
        home.save_message(text_message("a3", 3, "a", "nul\x00"))
        home.append_to_message("a3", {}, {0: " more"})
        home._write(lambda db: db.execute("UPDATE messages SET body = NULL WHERE id = 'a2'"))  # from before m012
        from daemon.store.postgres import PostgresStore

        with PostgresStore(postgres_url) as target:
            copy_sessions(home, target)
            assert bodies(target, "a") == bodies(home, "a")
            assert target.get_messages("a") == home.get_messages("a")
            assert_body_agrees(target, "a")


def test_a_body_that_does_not_decode_reads_from_the_rows(store: StoreQueries) -> None:
    store.create_session(session())
    for seq in (1, 2, 3):
        store.save_message(with_everything(f"m{seq}", seq))
    # A value the message's types refuse, as a struct replaced without checks may carry: the rows
    # never checked it and read it as it is; so does the read of a body that refuses it.
    odd = msgspec.structs.replace(text_message("m4", 4), status="streaming")
    odd = store.save_message(odd)
    store._write(lambda db: db.execute("UPDATE messages SET body = ? WHERE id = 'm2'", (b'{"not": "a message"',)))
    expected = [with_everything(f"m{seq}", seq) for seq in (1, 2, 3)]
    for message in expected:
        message.parts = [msgspec.structs.replace(p, data=None) for p in message.parts]
    assert store.get_messages("s1") == [*expected, odd]
    assert store.get_messages("s1", after_seq=1, limit=1) == expected[1:2]


@pytest.mark.parametrize("limit", [None, 1])
def test_an_empty_history_and_a_message_without_parts(store: StoreQueries, limit: int | None) -> None:
    store.create_session(session())
    assert store.get_messages("s1", limit=limit) == []
    store.save_message(ChatMessage(message_id="m1", session_id="s1", seq=1, role="user", parts=[]))
    assert [m.parts for m in assert_body_agrees(store)] == [[]]
