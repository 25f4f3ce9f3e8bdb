"""Safe table updates: merge_csv_rows replaces rows by key and never loses another process's rows."""

import csv
import multiprocessing

from apo_helpers.files import merge_csv_rows


def read(path):
    return list(csv.DictReader(path.open()))


def test_merge_adds_replaces_by_key_and_sorts(tmp_path):
    path = tmp_path / "sweep.csv"
    merge_csv_rows(path, [{"n": 300, "p": 0, "score": 0.5}], ["n", "p"])
    merge_csv_rows(path, [{"n": 150, "p": 0, "score": 0.4}, {"n": 300, "p": 300, "score": 0.6}], ["n", "p"])
    merge_csv_rows(path, [{"n": 300, "p": 0, "score": 0.55}], ["n", "p"])  # the same point again: replaced
    rows = read(path)
    assert [(r["n"], r["p"], r["score"]) for r in rows] == [("150", "0", "0.4"), ("300", "0", "0.55"),
                                                           ("300", "300", "0.6")]


def test_merge_keeps_columns_of_older_rows(tmp_path):
    path = tmp_path / "t.csv"
    merge_csv_rows(path, [{"n": 1, "a": 1}], ["n"])
    merge_csv_rows(path, [{"n": 2, "b": 2}], ["n"])
    assert read(path) == [{"n": "1", "a": "1", "b": ""}, {"n": "2", "a": "", "b": "2"}]


def test_merge_sorts_text_keys_after_numbers(tmp_path):
    path = tmp_path / "t.csv"
    merge_csv_rows(path, [{"agent": "pi_ref", "k": 8}, {"agent": "apo seed 0", "k": 8}], ["agent", "k"])
    merge_csv_rows(path, [{"agent": "10", "k": 8}, {"agent": "9", "k": 8}, {"agent": "apo seed 0", "k": 4}],
                   ["agent", "k"])
    assert [(r["agent"], r["k"]) for r in read(path)] == [("9", "8"), ("10", "8"), ("apo seed 0", "4"),
                                                        ("apo seed 0", "8"), ("pi_ref", "8")]


def _add(path, start):
    for n in range(start, start + 20):
        merge_csv_rows(path, [{"n": n, "who": start}], ["n"])


def test_concurrent_writers_lose_no_row(tmp_path):
    path = tmp_path / "t.csv"
    workers = [multiprocessing.get_context("fork").Process(target=_add, args=(path, s)) for s in (0, 100)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert sorted(int(r["n"]) for r in read(path)) == list(range(20)) + list(range(100, 120))
