"""The journal of serving decisions: numbers that keep rising across the controller's
restarts, a line being written skipped, the newest decisions kept."""

from __future__ import annotations

from pathlib import Path

from deepedge.dataplane.serving_decisions import (
    DecisionJournal,
    ServingDecision,
    decisions_path,
    read_decisions,
)

PLAN = {"groups": [{"variant": "b8", "node": "n1", "replicas": 1, "max_batch_size": 8}],
        "cameras": {"c1": "b8@n1"}}  # fmt: skip


def append(journal: DecisionJournal, cause: str = "node(s) n1 not alive") -> ServingDecision:
    return journal.append("d1", "t.cam", 100.0, cause, ("n1",), PLAN, {"node": None})


def test_numbers_rise_across_a_restart_and_the_documents_survive_the_disk(
    tmp_path: Path,
) -> None:
    path = decisions_path(tmp_path)
    first = DecisionJournal(path)
    assert [append(first).seq, append(first, "again").seq] == [1, 2]
    restarted = DecisionJournal(path)  # a restarted controller reopens the journal
    assert restarted.tail(10) == read_decisions(path) == first.tail(10)
    assert append(restarted).seq == 3
    decision = read_decisions(path)[-1]
    assert (decision.deployment_id, decision.model, decision.lost, decision.before) == (
        "d1", "t.cam", ("n1",), PLAN,
    )  # fmt: skip


def test_a_last_line_being_written_is_skipped_and_read_once_whole(tmp_path: Path) -> None:
    path = tmp_path / "decisions.jsonl"
    journal = DecisionJournal(path)
    append(journal)
    whole = path.read_bytes()
    append(journal)
    line = path.read_bytes()[len(whole) :]
    path.write_bytes(whole + line[: len(line) // 2])  # the writer is half-way through
    assert [d.seq for d in read_decisions(path)] == [1]
    path.write_bytes(whole + line)
    assert [d.seq for d in read_decisions(path)] == [1, 2]


def test_the_newest_are_kept_and_numbering_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "decisions.jsonl"
    journal = DecisionJournal(path, kept=3)
    for _ in range(7):  # the seventh passes twice the kept: rewritten with the newest 3
        append(journal)
    assert [d.seq for d in read_decisions(path)] == [5, 6, 7]
    assert append(DecisionJournal(path, kept=3)).seq == 8
    assert [d.seq for d in read_decisions(path)] == [5, 6, 7, 8]


def test_no_journal_is_no_decision_and_a_memory_journal_numbers_too(tmp_path: Path) -> None:
    assert read_decisions(tmp_path / "absent.jsonl") == []
    memory = DecisionJournal(None)
    assert [append(memory).seq, append(memory).seq] == [1, 2]
    assert list(tmp_path.iterdir()) == []


def test_the_journal_is_the_service_users_only(tmp_path: Path) -> None:
    """0600 in a 0700 folder, appended or rewritten, and narrowed when left wider."""
    path = decisions_path(tmp_path)
    journal = DecisionJournal(path, kept=1)
    append(journal)
    assert (path.stat().st_mode & 0o777, path.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    append(journal)
    append(journal)  # past twice the kept: rewritten whole
    assert [d.seq for d in read_decisions(path)] == [3]
    assert path.stat().st_mode & 0o777 == 0o600
    path.chmod(0o644)
    path.parent.chmod(0o755)
    DecisionJournal(path)
    assert (path.stat().st_mode & 0o777, path.parent.stat().st_mode & 0o777) == (0o600, 0o700)
