"""The one table formatter: Markdown for the report, aligned text for the terminal (benchmarks, fault and
operation tables, `npudure lab status`)."""

from __future__ import annotations

from npudure_workshop.bench.fmt import NA, LatencyColumns, section, table, text_table


def test_markdown_table_keeps_cells_as_they_are() -> None:
    assert table(["a", "bb"], [[1, "x"]]) == "| a | bb |\n|---|---|\n| 1 | x |"


def test_text_table_pads_each_column_to_its_widest_cell_and_drops_trailing_space() -> None:
    assert text_table(["BOARD", "SSH"], [["board10", "ok"], ["b2", "no"]]) == [
        "BOARD    SSH",
        "board10  ok",
        "b2       no",
    ]


def test_pipes_with_a_rule_and_minimum_widths_as_the_fault_tables() -> None:
    lines = text_table(["fault", "n"], [["hang", "12"]], sep=" | ", rule=True, min_widths=[6])
    assert lines == ["fault  | n", "-------+---", "hang   | 12"]


def test_figures_right_aligned_after_a_left_aligned_name_as_the_benchmarks() -> None:
    rows = [["scheduler", "812.4"], ["nginx", "1203.0"]]
    lines = text_table(["path", "req/s"], rows, align="lr", indent="  ")
    assert lines == ["  path        req/s", "  scheduler   812.4", "  nginx      1203.0"]


def test_a_section_opens_with_the_series_in_its_heading_and_its_intro_after_a_blank_line() -> None:
    assert section("Scaling", "s1", "How to read it.") == ["## Scaling (s1)", "", "How to read it.", ""]
    assert section("Saturation curve", "s1") == ["## Saturation curve (s1)", ""]


def test_latency_columns_give_the_header_and_the_cells_of_the_same_keys() -> None:
    columns = LatencyColumns(("p50", "p99_9", "max"))
    assert columns.header == ["p50 ms", "p99.9 ms", "max ms"]
    assert columns.cells({"p50": 1.25, "p99_9": None, "max": 20, "p99": 7.0}) == ["1.2", NA, "20.0"]
