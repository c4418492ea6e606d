"""The foundation detectors find the fault shape they exist for and stay quiet on benign shapes."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import NDArray

from prexid.detectors.bank import DetectorBank
from prexid.detectors.base import rows, subset, unique_rounds
from prexid.detectors.counter_rate import CounterRate
from prexid.detectors.error_counter import ErrorCounterSurprise
from prexid.detectors.peer import PeerDeviation
from prexid.detectors.robust import RobustDeviation
from prexid.detectors.signals import Kind
from tests.unit.wiring import scores

STEP = 15.0


def test_robust_deviation_gives_no_evidence_during_warmup() -> None:
    x = np.array([[1.0], [100.0], [1.0], [1e6]] + [[1.0]] * 5)
    p = scores(RobustDeviation(warmup=10), x)
    assert (p == 1.0).all()


def test_robust_deviation_one_spike_does_not_move_the_baseline() -> None:
    x = np.full((100, 1), 50.0) + np.tile([[0.0], [0.3]], (50, 1))
    x[60, 0] = 5000.0
    det = RobustDeviation()
    scores(det, x)
    assert det.baseline(np.array([0]))[0] == pytest.approx(50.15, abs=0.5)


def test_error_counter_burst_is_surprising_but_a_reset_is_not() -> None:
    x = np.zeros((300, 3))
    x[250:, 0] = np.arange(50) * 5  # 5 new errors every scrape
    x[:, 1] = np.r_[np.full(150, 40.0), np.zeros(150)]  # counter drops to 0: a reset
    x[:, 2] = np.r_[np.full(150, 100.0), np.full(150, 60.0)]  # ... to a value, not to 0: still a reset
    p = scores(ErrorCounterSurprise(warmup_s=0.0), x)  # the burst at 62 minutes, not the warm-up
    assert p[252, 0] < 1e-8
    assert p[:, 1].min() == 1.0
    assert p[:, 2].min() == 1.0  # not 60 new errors


def test_error_counter_learns_a_series_that_always_grows() -> None:
    x = np.cumsum(np.full((2000, 1), 3.0), axis=0)  # a chatty counter: 3 per scrape for eight hours
    p = scores(ErrorCounterSurprise(), x)
    assert p[-1, 0] > 0.01


def test_error_counter_learns_the_bursts_of_a_leaky_part_but_not_a_faster_pace() -> None:
    """A part that has leaked a burst of ~5 errors every twenty minutes for two days is not surprising at
    its next burst of 8; bursts a minute apart, growing one episode, are once the episode is long for
    the part's own chaining (half an hour: at three episodes an hour its Poisson pace would string
    bursts together within the 10-minute gap most of the time; judged by its single-burst episodes'
    errors instead, nine had paged, and so did a leaky part's drips chained by chance, wide-s94)."""
    rng = np.random.default_rng(1)
    n = 2 * 5760
    steps = np.zeros((n + 124, 2))
    steps[np.arange(40, n, 80), :] = 1 + rng.geometric(0.25, (len(range(40, n, 80)), 2))
    steps[n + 10, 0] = 8.0  # the next burst, on time
    steps[n + 4 : n + 124 : 4, 1] = 6.0  # bursts every minute
    p = scores(ErrorCounterSurprise(), np.cumsum(steps, axis=0))
    assert p[n + 10, 0] > 0.01
    ramp = p[n + 4 : n + 124 : 4, 1]
    assert ramp[0] > 0.01 and ramp[-1] < 1e-5
    clean = scores(ErrorCounterSurprise(), np.cumsum(np.r_[np.zeros(n), [8.0, 0.0, 0.0, 0.0, 8.0]])[:, None])
    assert 1e-6 < clean[-5, 0] < 1e-3  # a clean part's first burst of eight: one event, a vote
    assert clean[-1, 0] < 1e-9  # ... and eight more a minute later: an episode growing


def test_error_counter_one_burst_is_one_event_however_many_errors_it_booked() -> None:
    """wide-s70: a clean NVLink link books 30 replays in one scrape in a fleet that has seen no episode
    yet (p 1e-12 against its typical episode of 1.25 errors, so never learned: every later burst of the
    part, and of its fleet, was as rare, and three of them paged). One burst is one event: it is as rare
    as an episode starting at all, learned, and the part's next single bursts are ordinary."""
    steps = _fleet(leaky=[], episode=(1,), hours=8)
    bursts = list(range(400, 1900, 120))  # every half hour, 17 to 90 replays at once
    steps[bursts, 9] = np.linspace(17, 90, len(bursts)).round()
    p = _fleet_scores(steps)
    assert p[bursts[0], 9] > 1e-6  # a vote at most
    assert p[bursts[-4:], 9].min() > 1e-2  # learned: its habit


def _fleet(leaky: list[int], episode: tuple[int, ...], hours: float, n: int = 64) -> NDArray[np.float64]:
    """Error-counter steps of `n` parts of one field for `hours`: the `leaky` ones repeat `episode` (bursts
    of errors on consecutive scrapes) every 2 h, at staggered times; the others stay clean."""
    rows_ = int(hours * 240)
    steps = np.zeros((rows_, n))
    for k, part in enumerate(leaky):
        for start in range(40 + 37 * k, rows_ - len(episode), 480):
            steps[start : start + len(episode), part] = episode
    return steps


def _fleet_scores(steps: NDArray[np.float64], fields: bool = True) -> NDArray[np.float64]:
    det = ErrorCounterSurprise()
    n = steps.shape[1]
    if fields:
        det.set_fields(np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.int64))
    return scores(det, np.cumsum(steps, axis=0))


def test_error_counter_a_clean_parts_first_errors_are_judged_against_its_fleets() -> None:
    """Empirical Bayes: where a few parts leak one SBE every couple of hours, the leaky part's next drip
    is expected, while a clean part's first handful of SBEs growing over minutes (a row-remap failure's
    precursor) is strong evidence."""
    steps = _fleet(leaky=[1, 2, 3], episode=(1,), hours=24)
    steps[-30:-2:4, 10] = [1, 1, 2, 1, 2, 3, 3]  # a clean part: 13 SBEs in 7 minutes
    steps[-20, 1] = 1  # a leaky part: one more SBE
    p = _fleet_scores(steps)
    assert p[-20, 1] > 1e-2
    assert p[-30, 10] < 1e-3  # the first SBE already counts
    assert p[-30:, 10].min() < 1e-9


def test_error_counter_calls_nothing_rare_before_its_fleet_has_been_watched() -> None:
    """64 parts, a quarter leaking episodes of five bursts: in the first 20 minutes (the warm-up, before
    the fleet prior is refitted past it), a leaky part's first episode is a vote at most; after it, a
    clean part's burst of the same size in a fleet of single errors is strong evidence again."""
    bursty = _fleet(leaky=list(range(0, 64, 4)), episode=(2, 3, 1, 4, 2), hours=2)
    early = _fleet_scores(bursty[:80])  # its first 20 minutes: two leaky parts' first episodes
    assert early.min() >= 1e-3
    single = _fleet(leaky=list(range(0, 64, 4)), episode=(1,), hours=2)
    single[-30:-25, 9] = (2, 3, 1, 4, 2)
    assert _fleet_scores(single)[-30:-25, 9].min() < 1e-7


def test_error_counter_a_fleet_whose_counters_tick_in_bursts_does_not_page_for_the_next_one() -> None:
    """Where a quarter of the parts replay in episodes of five bursts, one more such episode on a part
    never seen to tick is ordinary, not a page (it would be in a fleet whose episodes are single errors)."""
    bursty = _fleet(leaky=list(range(0, 64, 4)), episode=(2, 3, 1, 4, 2), hours=24)
    single = _fleet(leaky=list(range(0, 64, 4)), episode=(1,), hours=24)
    for steps in (bursty, single):
        steps[-30:-25, 9] = (2, 3, 1, 4, 2)
    in_bursty, in_single = _fleet_scores(bursty), _fleet_scores(single)
    assert in_bursty[-30:-25, 9].min() > 1e-4
    assert in_single[-30:-25, 9].min() < 1e-7


def test_error_counter_an_escalated_episode_is_not_learned_as_the_parts_usual() -> None:
    """A clean part in a clean fleet books seven bursts in seven minutes (paged-strength), goes quiet for
    half an hour and does it again: a degrading HBM row, not a leaky part's drip. The first episode was
    itself rare (p < `escalated_p`), so it does not teach the part (nor its fleet) that such episodes are
    usual: the second is as strong evidence as the first. Learning it made the second one p ~ 2e-3."""
    steps = _fleet(leaky=[], episode=(1,), hours=6)
    first, second = list(range(600, 628, 4)), list(range(800, 828, 4))
    steps[first, 9] = 2
    steps[second, 9] = 2
    p = _fleet_scores(steps)
    assert p[first, 9].min() < 1e-9
    assert p[second, 9].min() < 1e-9


def test_error_counter_episodes_still_running_teach_the_fleet_that_its_parts_tick() -> None:
    """Two parts begin long bursty episodes in the fleet's first minutes; a third part's first burst
    after the warm-up is then what this fleet does, not a page (in a clean fleet it still is one). The
    fleet prior used to count episodes only once over (10 minutes quiet), so it still looked clean."""
    steps = np.zeros((140, 64))
    steps[60::8, 1] = 4  # from minute 15, a burst every 2 minutes: one episode, still running
    steps[64::8, 2] = 7
    first = [100, 106, 116, 120]  # minutes 25-30: a part never seen to tick, 59 errors in four bursts
    steps[first, 9] = (10, 3, 40, 6)
    clean = np.zeros_like(steps)
    clean[first, 9] = (10, 3, 40, 6)
    assert _fleet_scores(steps)[first, 9].min() > 1e-5
    assert _fleet_scores(clean)[first, 9].min() < 1e-9


def test_error_counter_a_part_taking_up_a_habit_after_one_rare_episode_is_learned_as_leaky() -> None:
    """One rare episode (seven bursts in a row), then a remapped row every 15 minutes for four hours, a
    pause, and the same again: a part that has become leaky, learned as such (p up to ~0.3). Scoring a
    decaying count of episodes against the part's rate from before them (tried on this branch) made
    each tick rarer than the last, never learned, p < 1e-4 for hours: a page waiting to happen."""
    steps = _fleet(leaky=[1, 2, 3], episode=(1,), hours=12)
    steps[600:607, 10] = 2
    ticks, later = list(range(700, 1700, 60)), list(range(2000, 2800, 60))
    steps[ticks + later, 10] = 1
    p = _fleet_scores(steps)
    assert p[600:607, 10].min() < 1e-9
    assert p[ticks[-1], 10] > 0.1
    assert p[later, 10].min() > 0.1


def test_error_counter_a_young_runs_first_episode_does_not_make_the_next_usual() -> None:
    """wide-s6's xid48: a clean part books three SBEs in five minutes (p ~ 5e-6: ordinary enough to be
    learned), goes quiet for 12 minutes, then books one every 3 minutes. Learning the first episode made
    the part's episodes three bursts long, so the next one's bursts were judged against it and it took
    twenty of them to get past 1e-9; judged against the part's history from before the run, six."""
    steps = _fleet(leaky=[1, 2, 3], episode=(1,), hours=8)
    first, later = [1500, 1510, 1518], list(range(1570, 1800, 12))
    steps[first + later, 10] = 1
    p = _fleet_scores(steps)
    assert p[first, 10].min() > 1e-6  # the first episode is learned (not escalated)
    assert p[later[5], 10] < 1e-9


def test_error_counter_a_short_rare_run_is_unlearned_once_over() -> None:
    """The ramp of the test above, then (after an hour and more of quiet) the same again: the first
    run got rare within two hours, so what it taught the part (its first, learned episode) is taken
    back once it is over, and the second is as rare as the first (kept, p 8e-4 at its sixth burst)."""
    steps = _fleet(leaky=[1, 2, 3], episode=(1,), hours=12)
    first, later = [1500, 1510, 1518], list(range(1570, 1700, 12))
    again = [x + 1100 for x in first + later]
    steps[first + later + again, 10] = 1
    p = _fleet_scores(steps)
    assert p[later, 10].min() < 1e-9
    assert p[again[8], 10] < 1e-8


def test_error_counter_a_leaky_parts_episodes_strung_together_by_chance_are_not_a_ramp() -> None:
    """wide-s28 node-01 GPU 7: a part booking a burst of ~10 PCIe replays every 20-70 minutes (its
    episodes single bursts) then books eight in 40 minutes, each within the 10-minute gap of the last:
    one episode of eight bursts. Judged by its single-burst episodes it reached p 1e-12 and paged; at
    its own pace an episode begins within 10 minutes of a burst about one time in six, so eight in a
    row is unusual, not page-strength (3e-7). A clean part's same eight bursts still are."""
    steps = _fleet(leaky=[1, 2, 3], episode=(10,), hours=8)
    drips = [100, 300, 420, 700, 860, 1050, 1230, 1330]
    chain = [1400, 1413, 1449, 1461, 1498, 1518, 1522, 1556]  # wide-s28's burst times, in scrapes
    steps[drips, 10] = 10
    steps[chain, 10] = 10
    steps[chain, 20] = 10
    p = _fleet_scores(steps)
    assert p[chain, 10].min() > 1e-7
    assert p[chain, 20].min() < 1e-10


def test_error_counter_a_clean_parts_bursts_are_not_judged_by_its_leaky_parts_chaining() -> None:
    """wide-s19 node-04 GPU 4 (an xid63's precursor): a clean part books twelve SBEs over 18 minutes, in a
    fleet whose episodes over are mostly six leaky parts' Poisson drips, four an hour, which string
    together two bursts an episode at their pace. Judged by the fleet's two bursts an episode, each burst
    was only ~2x rarer (4e-7 at the twelfth: never a page); judged by its own pace's chaining times the
    fleet's clustering beyond its parts' paces (none here), the ramp is page-strength by its tenth. The
    leaky parts' drips, strung together at their own pace, stay ordinary once their pace is learned."""
    rng = np.random.default_rng(7)
    steps = np.zeros((12 * 240, 64))
    steps[:, 1:7] = rng.random((12 * 240, 6)) < 1 / 60
    ramp = 2400 + np.array([0, 29, 41, 49, 50, 55, 67, 68, 69, 70, 71, 73])  # its SBEs' scrapes
    steps[ramp, 10] = 1
    p = _fleet_scores(steps)
    assert p[ramp[:7], 10].min() < 1e-7
    assert p[ramp, 10].min() < 1e-10
    assert p[480:, 1:7].min() > 1e-6  # after two hours


def test_error_counter_a_leaky_parts_single_errors_chained_by_chance_are_no_more_errors_than_bursts() -> None:
    """wide-s94 node-01 GPU 6: a part dripping single SBEs every 20-40 minutes (its episodes single
    bursts of one error) books eight in 42 minutes, each within the 10-minute gap of the last: one
    episode. At its pace that is unusual (p ~1e-4), but judged by its episodes' errors (mean 1.002: one
    each) six errors were 1e-14 and paged. An episode's errors are its bursts' times a burst's errors
    (one here): no rarer than its bursts. A clean part's same eight SBEs still page (wide-s98's NVLink
    replays were the same)."""
    steps = _fleet(leaky=[1, 2, 3], episode=(1,), hours=12)
    drips = [59, 207, 309, 394, 563, 622, 764, 999, 1081, 1162, 1266, 1416, 1494, 1617, 1693, 1833]
    chain = [1912, 1947, 1976, 1998, 2007, 2034, 2047, 2081]  # wide-s94's SBE times, in scrapes
    steps[drips + chain, 10] = 1
    steps[chain, 20] = 1
    p = _fleet_scores(steps)
    assert p[chain, 10].min() > 1e-5
    assert p[chain, 20].min() < 1e-11


@pytest.mark.parametrize("per_hour", [0.5, 2.0, 4.0])
def test_error_counter_chaining_is_the_mean_episode_of_poisson_bursts_at_that_episode_rate(
    per_hour: float,
) -> None:
    """Poisson bursts cut into episodes at `gap_s`: the episodes' rate alone gives their mean bursts."""
    det = ErrorCounterSurprise()
    times = np.cumsum(np.random.default_rng(3).exponential(3600.0 / per_hour, 200_000))
    starts = np.r_[True, np.diff(times) > det.gap_s]
    rate = starts.sum() / times[-1]
    assert det.chaining(np.array([rate]))[0] == pytest.approx(len(times) / starts.sum(), rel=0.02)


def test_counter_rate_scores_rates_not_levels() -> None:
    rate = np.full((200, 1), 1e6) + np.tile([[0.0], [1e4]], (100, 1))
    rate[180:] *= 5
    p = scores(CounterRate(), np.cumsum(rate * STEP, axis=0))
    assert p[100:179].min() > 1e-4
    assert p[181, 0] < 1e-8


def test_a_contiguous_ascending_batch_is_read_as_a_slice_and_anything_else_by_index() -> None:
    assert rows(np.arange(5, 12, dtype=np.int64)) == slice(5, 12)
    for ids in ([5, 7, 8], [6, 5, 7], [5, 5, 6], [-1, 0, 1], []):
        arr = np.array(ids, dtype=np.int64)
        assert rows(arr) is arr
    assert subset(slice(5, 9), np.array([True, False, True, True])).tolist() == [5, 7, 8]
    assert subset(np.array([9, 4, 6], dtype=np.int64), np.array([2, 0])).tolist() == [6, 9]


def test_peer_groups_of_equal_size_score_exactly_as_the_general_grouping() -> None:
    """Equal groups (the GPUs of a node) take a reshape of the state; unequal ones a gather per group."""
    n, rng = 64, np.random.default_rng(5)
    x = np.round(60.0 + rng.normal(0, 1, n) + rng.normal(0, 0.4, (200, n)), 2)
    x[150:, 3] += 6.0
    x[rng.integers(0, 200, 60), rng.integers(0, n, 60)] = np.nan  # rows with missing peers
    ids = np.arange(n, dtype=np.int64)
    equal, general = PeerDeviation(), PeerDeviation()
    equal.set_groups(ids, ids // 8)
    general.set_groups(np.r_[ids, 1000], np.r_[ids // 8, 8])  # one lone extra group: sizes differ
    for t, row in enumerate(x):
        ts = np.full(n, t * 15.0)
        np.testing.assert_array_equal(equal.update(ids, ts, row), general.update(ids, ts, row))
    assert equal._width == 8 and general._width == 0


def test_duplicate_series_in_one_batch_are_applied_in_time_order() -> None:
    ids = np.array([7, 3, 7, 7, 3], dtype=np.int64)
    ts = np.array([30.0, 10.0, 10.0, 20.0, 20.0])
    rounds = [ids[r].tolist() for r in unique_rounds(ids, ts)]
    assert rounds == [[3, 7], [3, 7], [7]]
    order = [ts[r].tolist() for r in unique_rounds(ids, ts)]
    assert order == [[10.0, 10.0], [20.0, 20.0], [30.0]]


def test_bank_routes_each_kind_to_its_detector_and_ignores_unknown_series() -> None:
    bank = DetectorBank()
    bank.error_counter.warmup_s = 0.0  # one error counter for ten minutes: within its warm-up otherwise
    bank.set_kinds(
        np.array([0, 1, 2], dtype=np.int64),
        np.array([Kind.GAUGE, Kind.ERROR_COUNTER, Kind.IGNORED], dtype=np.uint8),
    )
    for t in range(40):
        ev = bank.update(np.array([0, 1, 2, 5000]), np.full(4, t * STEP), np.array([1.0, 0.0, 9e9 * t, 1.0]))
    assert ev.p[2] == 1.0 and ev.p[3] == 1.0
    ev = bank.update(np.array([0, 1]), np.full(2, 41 * STEP), np.array([1.0, 50.0]))
    assert ev.p[1] < 1e-2 and ev.p[0] == 1.0  # one burst: one event
    ev = bank.update(np.array([0, 1]), np.full(2, 42 * STEP), np.array([1.0, 100.0]))
    assert ev.p[1] < 1e-8 and ev.p[0] == 1.0  # a second one on the next scrape: an episode growing


def test_a_repeated_counter_reading_is_a_cached_scrape_but_a_counter_that_stays_put_has_stopped() -> None:
    """An exporter serving its cache repeats a reading now and then (rate 0, then double): not evidence.
    A counter that stays put scrape after scrape (a stalled mount's bytes) is."""
    rate = np.full((400, 1), 1e6) + np.tile([[0.0], [1e4]], (200, 1))
    x = np.cumsum(rate * STEP, axis=0)
    x[100:300:7] = x[99:299:7]  # every seventh reading repeats the one before
    x[330:345] = x[329]  # then the counter stops for 15 scrapes
    p = scores(CounterRate(), x)
    assert p[100:300].min() > 1e-4
    assert p[330:345].min() < 1e-6


def test_a_counter_served_stale_for_three_scrapes_resumes_at_its_usual_rate() -> None:
    """Wide tuning cell seed 21: an energy counter read the same value three scrapes running (a stale
    exporter), then the fresh one. The rise since the last moving reading spans all four intervals; over
    the last one alone it read as 3x the usual power (p = 10^-8.6) and paged with an error burst."""
    rate = np.full((400, 1), 1e6) + np.tile([[0.0], [1e4]], (200, 1))
    x = np.cumsum(rate * STEP, axis=0)
    stale = np.arange(100, 380, 40)
    for k in stale:
        x[k + 1 : k + 4] = x[k]  # the 2nd and 3rd repeats are scored as a stopped counter: zero rates
    p = scores(CounterRate(), x)
    assert p[stale + 4].min() > 1e-4


def test_a_counter_restart_is_followed_by_a_quiet_period_then_scored_again() -> None:
    rate = np.full((200, 1), 1e6) + np.tile([[0.0], [1e4]], (100, 1))
    x = np.cumsum(rate * STEP, axis=0)
    x[120:] -= x[119]  # the node rebooted: the counter restarts from zero ...
    x[121:126] += 5e9  # ... and reads its disks at boot for a minute
    x[126:] += 5e9
    x[180:] += np.cumsum(np.full((20, 1), 5e7 * STEP), axis=0)  # later, a real change of rate
    p = scores(CounterRate(restart_quiet_s=300.0), x)
    assert p[120:141].min() == 1.0  # the restart and its transient are not scored
    assert p[141:180].min() > 1e-4  # afterwards the usual rate is usual again
    assert p[181, 0] < 1e-8


def test_the_geometric_tail_is_one_at_the_smallest_episode_even_when_every_episode_is_one() -> None:
    """P(X >= 1) = 1 for any mean; with mean 1 (every episode one error) log(stay) is -inf, and
    0 * -inf was NaN, a p no detector may return."""
    from prexid.detectors.error_counter import geometric_tail

    got = geometric_tail(np.array([0.5, 1.0, 1.5, 2.0, 2.0, 3.0]), np.array([1.0, 1.0, 1.0, 1.0, 2.0, 2.0]))
    assert np.array_equal(got, [1.0, 1.0, 0.0, 0.0, 0.5, 0.25])


def test_a_creep_read_in_whole_degrees_points_up_where_the_cusum_found_it() -> None:
    """A temperature creeping up, printed in whole degrees, reads 47 below its level baseline as often as
    48 above it: where the drift CUSUM's evidence is the strongest, the sample points the creep's way,
    so fusion does not read a warming part as cooling (hotter against its load)."""
    bank = DetectorBank()
    bank.set_kinds(np.array([0]), np.array([Kind.GAUGE], dtype=np.uint8))
    rng = np.random.default_rng(0)
    low_and_strong: list[bool] = []
    for k in range(240 * 8):
        share = 0.1 + 0.8 * min(1.0, max(0.0, (k - 240 * 4) / (240 * 3)))  # 48 ever more often
        x = 47.0 + float(rng.random() < share)
        ev = bank.update(np.array([0]), np.array([STEP * k]), np.array([x]))
        if ev.p[0] < 1e-3 and x == 47.0:
            low_and_strong.append(bool(ev.up()[0]))
    assert len(low_and_strong) > 100
    assert sum(low_and_strong) > len(low_and_strong) / 3  # none without the creep's direction
