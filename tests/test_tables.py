"""Terminal tables: errors in one cell, and columns by priority within a width."""

import math

from neural_testbed.cli import tables
from neural_testbed.leaderboard import scoring


def test_a_value_is_shown_to_the_decimal_place_of_its_two_digit_error():
    assert scoring.plus_minus(0.119434, 0.007067) == "0.1194±0.0071"
    assert scoring.plus_minus(13.23, 0.8534) == "13.23±0.85"
    assert scoring.plus_minus(1234.4, 56.0) == "1234±56"
    assert scoring.plus_minus(1.0, 0.0) == "1"  # the normaliser's own: no error
    assert scoring.plus_minus(math.nan, 0.1) == "n/a"
    assert scoring.plus_minus(0.5, math.nan) == "0.5"


def test_columns_are_taken_by_priority_shown_in_order_and_the_rest_named():
    columns = [("agent", ["mlp", "ensemble+"], 0), ("low", ["12345", "6"], 2),
               ("high", ["1", "2"], 1), ("empty", ["", ""], 0)]
    # agent (9) + high (4) with a 2-space gap is 15; low would make it 22.
    table, left_out = tables.fitted(columns, 15)
    assert table.splitlines() == ["agent      high", "mlp        1", "ensemble+  2"]
    assert left_out == ["low"]  # the empty column is left out without a word
    table, left_out = tables.fitted(columns, 22)
    assert table.splitlines()[0] == "agent      low    high" and left_out == []
    table, left_out = tables.fitted(columns, 3)  # the first column is always shown
    assert table.splitlines()[0] == "agent" and left_out == ["low", "high"]
