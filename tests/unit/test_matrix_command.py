"""`prexid matrix`'s list options: seeds as numbers and inclusive ranges A..B, variants by name; any other
word is an argparse error naming it (exit 2). Before, `--tune-seeds '55..78'` died with a traceback
(`ValueError: invalid literal for int()`), and an unknown variant failed each of its cells one by one."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from prexid.service.app import cli


def parse(*argv: str) -> argparse.Namespace:
    return cli.parser().parse_args(["matrix", *argv])


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """`prexid matrix ARGV` refused by argparse (exit 2): what it printed to stderr."""
    with pytest.raises(SystemExit) as exit_:
        parse(*argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err


def test_seed_ranges_mix_with_single_seeds_and_keep_the_words_typed() -> None:
    args = parse("--tune-seeds", "1..12 19..42", "--report-seeds", "100,103..105 7")
    assert args.tune_seeds.items == (*range(1, 13), *range(19, 43))
    assert args.report_seeds.items == (100, 103, 104, 105, 7)
    assert str(args.tune_seeds) == "1..12 19..42"
    assert parse("--tune-seeds", "5..5").tune_seeds.items == (5,)
    assert parse("--report-seeds", "").report_seeds.items == ()


def test_defaults_are_the_declared_sets() -> None:
    args = parse()
    assert args.tune_seeds.items == (1, 2, 3) and args.report_seeds.items == (100, 101, 102)
    assert "wide" in args.tune_variants.items and "random" in args.report_variants.items


@pytest.mark.parametrize("option", ["--tune-seeds", "--report-seeds"])
@pytest.mark.parametrize(
    ("words", "message"),
    [
        ("55..x", "'55..x' is not a seed: whole numbers >= 0 and inclusive ranges A..B"),
        ("1 2.5", "'2.5' is not a seed"),
        ("1..3..5", "'1..3..5' is not a seed"),
        ("78..55", "range '78..55' runs backwards (A..B needs A <= B)"),
        ("-3", "'-3': seeds are never negative"),
        ("1..-3", "'1..-3': seeds are never negative"),
        ("1..5 4", "seed 4 given twice"),
        ("0..10000", "range '0..10000' holds more than 10000 seeds"),
    ],
)
def test_a_bad_seed_word_is_an_argparse_error_naming_it(
    option: str, words: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = refused(capsys, f"{option}={words}")
    assert f"prexid matrix: error: argument {option}: {message}" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("option", ["--tune-variants", "--report-variants"])
@pytest.mark.parametrize(
    ("words", "message"),
    [
        ("wide wdie", "unknown variant 'wdie'; choose from default, "),
        ("wide,wide", "variant 'wide' given twice"),
    ],
)
def test_a_bad_variant_is_an_argparse_error_naming_it(
    option: str, words: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert f"prexid matrix: error: argument {option}: {message}" in refused(capsys, option, words)


def test_the_range_that_crashed_runs_and_the_report_quotes_it_as_typed(tmp_path: Path) -> None:
    """`--report-only` over an empty directory: the cells are listed from the ranges, none is run."""
    argv = ["--out", str(tmp_path), "--tune-variants", "wide", "--tune-seeds", "55..78"]
    argv += ["--report-variants", "", "--report-seeds", "", "--report-only"]
    assert cli.main(["matrix", *argv]) == 0
    report = (tmp_path / "report.md").read_text()
    assert "--tune-variants wide --tune-seeds 55..78 --report-variants '' --report-seeds ''" in report
    assert "24 cells" in report
