"""The generic univariate corpus (issue 16 item 5): labels as NAB lays them out, scores as NAB sums them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest

from prexid.service.offline.corpus.generate import KINDS, POINTS, PROBATION, STEP_S, make_corpus, write_corpus
from prexid.service.offline.corpus.score import corpus_score, per_kind, windowed_gaussian
from prexid.service.offline.evaluate.nab import PROFILES, scaled_sigmoid

STANDARD = PROFILES["standard"]


def test_a_seed_gives_the_same_corpus_and_another_seed_another() -> None:
    a, b, c = make_corpus(7, 1), make_corpus(7, 1), make_corpus(8, 1)
    assert [s.name for s in a] == [f"{k}-0" for k in KINDS]
    assert all(
        np.array_equal(x.values, y.values) and x.windows == y.windows for x, y in zip(a, b, strict=True)
    )
    assert not all(np.array_equal(x.values, y.values) for x, y in zip(a, c, strict=True))


def test_windows_follow_nab_after_the_probationary_part_a_tenth_of_the_file_in_all() -> None:
    for s in make_corpus(3, 2):
        if s.kind == "none":
            assert s.windows == []
            continue
        assert 1 <= len(s.windows) <= 2
        span = POINTS * STEP_S
        assert sum(b - a for a, b in s.windows) == pytest.approx(0.1 * span)
        assert min(a for a, _ in s.windows) > s.ts[0] + PROBATION * span
        assert max(b for _, b in s.windows) <= s.ts[0] + span
        assert (len(s.ts) < POINTS) == (s.kind == "gaps")


def test_the_perfect_detector_scores_100_the_null_0_and_false_detections_cost() -> None:
    series = make_corpus(5, 1)

    def at_onsets(shift_s: float) -> list[np.ndarray]:
        fired = []
        for s in series:
            f = np.zeros(len(s.ts), dtype=bool)
            for a, _ in s.windows:
                f[np.searchsorted(s.ts, a + shift_s)] = True
            fired.append(f)
        return fired

    null = [np.zeros(len(s.ts), dtype=bool) for s in series]
    assert corpus_score(series, null, STANDARD).normalised == pytest.approx(0.0)
    perfect = corpus_score(series, at_onsets(0.0), STANDARD)
    assert perfect.normalised == pytest.approx(100.0 * scaled_sigmoid(-1.0) / scaled_sigmoid(-1.0), rel=0.02)
    noisy = at_onsets(0.0)
    quiet = next(i for i, s in enumerate(series) if s.kind == "none")
    noisy[quiet][len(noisy[quiet]) // 2] = True  # after probation: one false detection
    assert corpus_score(series, noisy, STANDARD).raw == pytest.approx(perfect.raw - STANDARD.fp)
    assert per_kind(series, noisy, STANDARD)["none"] == pytest.approx(1.0)
    early = at_onsets(0.0)
    early[quiet][5] = True  # in the probationary part: not counted
    assert corpus_score(series, early, STANDARD).raw == pytest.approx(perfect.raw)


def test_the_windowed_gaussian_judges_each_point_by_earlier_points_only() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(0.0, 1.0, 500)
    changed = x.copy()
    changed[300:] = 1e6
    assert np.array_equal(windowed_gaussian(x)[:300], windowed_gaussian(changed)[:300])
    x[400] = 12.0
    assert windowed_gaussian(x)[400] > 8.0


def test_corpus_files_read_back_through_replay_csv_and_nabs_windows_format(tmp_path: Path) -> None:
    from prexid.service.offline.evaluate.nab import read_scores
    from prexid.service.offline.evaluate.univariate import replay_csv, score_series

    series = [s for s in make_corpus(2, 1) if s.kind == "level_shift"]
    write_corpus(series, tmp_path)
    windows = orjson.loads((tmp_path / "combined_windows.json").read_bytes())
    assert list(windows) == ["level_shift-0.csv"] and len(windows["level_shift-0.csv"]) == len(
        series[0].windows
    )
    n = replay_csv(tmp_path / "level_shift-0.csv", tmp_path / "scores.csv")
    ts, detected = read_scores(tmp_path / "scores.csv")
    assert n == len(series[0].ts) and ts[0] == series[0].ts[0]
    _, fired = score_series(series[0].ts, series[0].values)
    assert detected == [bool(f) for f in fired]  # the file says what the corpus scorer counts
    scores = [float(line.split(",")[2]) for line in (tmp_path / "scores.csv").read_text().splitlines()[1:]]
    assert min(scores) >= 0.0 and max(scores) <= 1.0  # NAB's tools read scores in [0, 1]


def test_scoring_files_together_gives_each_the_score_it_gets_alone() -> None:
    from prexid.service.offline.evaluate.univariate import score_many, score_series

    series = make_corpus(6, 1)
    together = score_many([(s.ts, s.values) for s in series])
    for k in (0, KINDS.index("gaps"), len(series) - 1):  # gaps: a shorter file drops out early
        alone = score_series(series[k].ts, series[k].values)
        assert np.array_equal(together[k][0], alone[0]) and np.array_equal(together[k][1], alone[1])


def test_prexid_corpus_writes_the_report_result_and_plot(tmp_path: Path) -> None:
    from prexid.service.app.cli import main

    assert main(["corpus", "--out", str(tmp_path), "--seed", "4", "--per-kind", "1"]) == 0
    result = orjson.loads((tmp_path / "result.json").read_bytes())
    assert result["files"] == len(KINDS) and set(result["prexid"]) == set(PROFILES)
    assert -100.0 <= result["prexid"]["standard"] <= 100.0
    assert 0.0 < result["windowed_gaussian_best"]["standard"] <= 100.0
    assert (
        set(result["prexid_swept"]) == set(PROFILES) and -100.0 <= result["prexid_swept"]["standard"] <= 100.0
    )
    assert "| standard |" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "by_kind.png").stat().st_size > 1000


def test_a_held_shift_scores_its_onset_not_every_point_it_is_held() -> None:
    """NAB's optimiser sweeps one threshold over every point's score: a shift held for hours at the p
    floor was one point over any threshold per point held, each a false positive once its window
    passed. Its onset scores high, the points that only repeat it 0, and the detection is unchanged."""
    from prexid.service.offline.evaluate.univariate import score_series

    rng = np.random.default_rng(5)
    x = 50.0 + rng.normal(0.0, 1.0, 1600)
    x[1000:] += 40.0  # held to the end: 600 points
    scores, fired = score_series(np.arange(len(x)) * STEP_S, x)
    assert np.flatnonzero(fired[1000:]).tolist() == [0]
    assert scores[1000] >= 6.0  # the detection scores its surprise
    assert np.count_nonzero(scores[1000:] >= 6.0) <= 3  # its onset and escalations, not 600 points
    assert np.all(scores[fired] >= 6.0) and np.all(scores >= 0.0)


def test_sweeping_prexids_score_column_finds_what_its_own_decisions_find() -> None:
    """The score ranks points as the decisions do: swept at its best threshold in hindsight it scores
    within a few points of the decisions on a development corpus (the raw surprise did not)."""
    from prexid.service.offline.corpus.score import best_threshold
    from prexid.service.offline.evaluate.univariate import score_many

    series = make_corpus(1, 1)
    scored = score_many([(s.ts, s.values) for s in series])
    own = corpus_score(series, [f for _, f in scored], STANDARD).normalised
    swept = best_threshold(series, [sc for sc, _ in scored], STANDARD)[1]
    assert swept >= own - 5.0


def test_the_corpus_at_another_cadence_keeps_its_files_and_spaces_its_points() -> None:
    """`--step-s`: the same kinds and windows' share at NAB's hourly cadence; a day is 24 points."""
    hourly, five = make_corpus(2, 1, step_s=3600.0), make_corpus(2, 1)
    assert [s.name for s in hourly] == [s.name for s in five]
    for s in hourly:
        assert np.all(np.diff(s.ts) >= 3600.0) and np.any(np.diff(s.ts) == 3600.0)
        assert sum(b - a for a, b in s.windows) == pytest.approx(0.1 * POINTS * 3600.0 if s.windows else 0.0)


@pytest.mark.parametrize("bad", ["0", "-300", "nan", "inf", "five", "21601", "100000"])
def test_prexid_corpus_refuses_a_cadence_that_is_no_positive_number_of_seconds(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from prexid.service.app.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["corpus", "--step-s", bad])
    assert exit_.value.code == 2 and "--step-s" in capsys.readouterr().err  # 100000: a traceback before
