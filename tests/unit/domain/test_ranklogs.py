"""Per-rank prefixes for a distributed job's combined log stream, and one rank's lines read
back from it (``select_lines``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpupool.domain.ranklogs import (
    RankLogMerger,
    prefix,
    prefix_text,
    rank_label,
    select_lines,
    split_lines,
    task_label,
)

R0, R1 = rank_label(0), rank_label(1)


def test_labels_and_prefix() -> None:
    assert prefix(rank_label(3)) == "[rank 3] "
    assert prefix(task_label(1)) == "[task 1] "


def test_lines_of_two_ranks_stay_whole_when_their_chunks_interleave() -> None:
    merger = RankLogMerger()
    out = merger.feed(R0, "epoch 1 lo")
    out += merger.feed(R1, "epoch 1 loss 0.9")
    out += merger.feed(R0, "ss 0.8\nepoch 2")
    out += merger.feed(R1, "1\n")
    assert out == ["[rank 0] epoch 1 loss 0.8\n", "[rank 1] epoch 1 loss 0.91\n"]
    assert list(merger.pending()) == [R0]
    assert merger.flush() == ["[rank 0] epoch 2\n"]
    assert merger.flush() == []


def test_carriage_returns_keep_the_line_as_last_drawn() -> None:
    merger = RankLogMerger()
    out = merger.feed(R0, " 10%|#   \r 50%|#####\r")
    assert out == [] and list(merger.pending()) == [R0]
    out = merger.feed(R0, "100%|##########\r\ndone\r\n")
    assert out == ["[rank 0] 100%|##########\n", "[rank 0] done\n"]
    assert merger.feed(R1, "a\r") == []
    assert merger.feed(R1, "\nb\n") == ["[rank 1] a\n", "[rank 1] b\n"]


def test_a_held_progress_bar_stays_small_and_flushes_as_last_drawn() -> None:
    merger = RankLogMerger(max_pending=100)
    for percent in range(0, 101):
        assert merger.feed(R0, f"\r{percent:3d}%") == []
    assert merger.flush(R0) == ["[rank 0] 100%\n"]


def test_a_line_longer_than_the_bound_is_given_out_in_pieces() -> None:
    merger = RankLogMerger(max_pending=8)
    assert merger.feed(R0, "0123456") == []
    assert merger.feed(R0, "789") == ["[rank 0] 0123456789\n"]
    assert merger.feed(R0, "ab\n") == ["[rank 0] ab\n"]


def test_bytes_split_inside_a_character_are_decoded_whole() -> None:
    merger = RankLogMerger()
    text = "température ✓\n".encode()
    cut = text.index("✓".encode()) + 1
    assert merger.feed(R0, text[:cut]) == []
    assert merger.feed(R1, b"other\n") == ["[rank 1] other\n"]
    assert merger.feed(R0, text[cut:]) == ["[rank 0] température ✓\n"]
    assert merger.feed(R0, b"bad \xff\n") == ["[rank 0] bad \ufffd\n"]
    assert merger.feed(R1, b"half \xe2\x9c") == []
    assert merger.flush() == ["[rank 1] half \ufffd\n"]


def test_prefix_text_of_a_finished_log() -> None:
    assert prefix_text(R1, "a\nb") == "[rank 1] a\n[rank 1] b\n"
    assert prefix_text(R1, "a\n\nb\n") == "[rank 1] a\n[rank 1] \n[rank 1] b\n"
    assert prefix_text(R1, "") == ""


def test_split_lines() -> None:
    assert split_lines("a\r\nb\rc\nrest\r") == (["a", "c"], "rest\r")
    assert split_lines("x\ry") == ([], "y")


@given(
    chunks=st.lists(
        st.tuples(st.sampled_from([R0, R1]), st.text(alphabet="ab \n", max_size=12)), max_size=20
    )
)
def test_every_line_of_every_rank_comes_out_once_whole_and_in_order(chunks) -> None:
    merger = RankLogMerger()
    out = [line for label, text in chunks for line in merger.feed(label, text)] + merger.flush()
    for label in (R0, R1):
        lines = "".join(text for name, text in chunks if name == label).split("\n")
        lines = lines[:-1] if lines[-1] == "" else lines  # a final newline ends the last line
        expected = "".join(f"{prefix(label)}{line}\n" for line in lines)
        got = "".join(line for line in out if line.startswith(prefix(label)))
        assert got == expected
        assert all(line.endswith("\n") and line.count("\n") == 1 for line in out)


# -- one rank's lines read back --------------------------------------------------------------------


# One rank's lines read back from a distributed job's merged log (``select_lines``).

LABELS = [rank_label(0), rank_label(1), rank_label(11), task_label(1)]
# a program's own text (one starting with a prefix of its own: see the tests below)
LINE = st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=["Cs"])).filter(
    lambda text: not text.startswith("[")
)


def test_a_label_keeps_its_own_lines_without_the_prefix_and_drops_the_rest() -> None:
    log = "[rank 1] a\n[rank 11] b\n[task 1] c\nplain\n[rank 1]no space\n[rank 1] last"
    assert select_lines(log, rank_label(1)) == "a\nlast"
    assert select_lines(log, rank_label(11)) == "b\n"
    assert select_lines(log, task_label(1)) == "c\n"
    assert select_lines(log, rank_label(2)) == ""


def test_a_line_with_several_prefixes_belongs_to_each_and_loses_only_the_one_asked() -> None:
    log = "[task 1] [rank 5] loss 0.3\n"
    assert select_lines(log, task_label(1)) == "[rank 5] loss 0.3\n"
    assert select_lines(log, rank_label(5)) == "[task 1] loss 0.3\n"
    assert select_lines("text [rank 5] later\n", rank_label(5)) == ""


def test_a_program_s_own_bracketed_text_after_the_prefix_is_not_a_prefix() -> None:
    log = "[rank 0] [rank 1] is slow\n[task 0] [task 2] done\n"
    assert select_lines(log, rank_label(0)) == "[rank 1] is slow\n"
    assert select_lines(log, rank_label(1)) == ""
    assert select_lines(log, task_label(0)) == "[task 2] done\n"
    assert select_lines(log, task_label(2)) == ""


@given(st.lists(st.tuples(st.sampled_from(LABELS), LINE), max_size=30))
def test_each_label_reads_back_exactly_the_lines_it_wrote(written: list[tuple[str, str]]) -> None:
    merger = RankLogMerger()
    log = "".join(line for label, text in written for line in merger.feed(label, text + "\n"))
    for label in LABELS:
        assert select_lines(log, label) == "".join(f"{t}\n" for x, t in written if x == label)
