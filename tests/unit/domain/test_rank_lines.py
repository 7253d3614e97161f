"""One rank's lines read back from a distributed job's merged log (``select_lines``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpupool.domain.ranklogs import RankLogMerger, rank_label, select_lines, task_label

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
