"""The kit's stall watch: a machine that stood still is seen, on either clock, and judged once."""

from __future__ import annotations

import threading

from chaos.stall import INTERVAL, LIMIT, Rerun, Stall, StallWatch, describe, judge, verdict


def test_a_look_on_time_is_no_stall_and_one_past_the_limit_is() -> None:
    assert judge(INTERVAL + 0.05, INTERVAL + 0.05, 100.0) is None
    assert judge(INTERVAL + LIMIT - 0.01, INTERVAL, 100.0) is None
    found = judge(INTERVAL + 7.0, INTERVAL + 7.0, 100.0)
    assert found == Stall(at=100.0, seconds=7.0, wall_gap=INTERVAL + 7.0, monotonic_gap=INTERVAL + 7.0)


def test_a_pause_that_stops_only_the_monotonic_clock_is_seen_on_the_wall_clock() -> None:
    found = judge(40.25, 0.25, 100.0)
    assert found is not None and found.seconds == 40.0
    stepped_back = judge(-30.0, 5.25, 100.0)  # the wall clock stepped back while starved
    assert stepped_back is not None and stepped_back.seconds == 5.0


def test_only_a_failure_during_a_stall_runs_again_and_only_once() -> None:
    stood = [Stall(at=1.0, seconds=5.0, wall_gap=5.25, monotonic_gap=5.25)]
    assert verdict(True, stood, already_rerun=False) is Rerun.AGAIN
    assert verdict(True, [], already_rerun=False) is Rerun.KEEP, "a failure with the machine running stands"
    assert verdict(False, stood, already_rerun=False) is Rerun.KEEP, "a pass during a stall stands"
    assert verdict(True, stood, already_rerun=True) is Rerun.KEEP, "never a third run"


class _Clocks:
    """Both clocks, moved by the test; the watch's thread reads them. Reads before and after the
    step are counted apart: reads before it pile up while the test waits, and must not be taken
    for looks at the moved clock."""

    def __init__(self) -> None:
        self.wall, self.mono = 1_000.0, 50.0
        self.lock = threading.Lock()
        self.stepped = False
        self.before, self.after = threading.Semaphore(0), threading.Semaphore(0)

    def read_wall(self) -> float:
        with self.lock:
            (self.after if self.stepped else self.before).release()
            return self.wall

    def step(self, wall: float, mono: float) -> None:
        with self.lock:
            self.wall += wall
            self.mono += mono
            self.stepped = True


def test_the_watch_records_a_stall_and_finds_it_by_the_run_it_overlaps() -> None:
    clocks = _Clocks()
    watch = StallWatch(interval=0.001, limit=LIMIT, wall=clocks.read_wall, monotonic=lambda: clocks.mono)
    with watch:
        assert clocks.before.acquire(timeout=5), "the watch never looked"
        clocks.step(wall=12.0, mono=0.0)  # paused: the wall clock jumped, the monotonic one stood still
        # The first look at the moved clock records the stall before the watch reads the wall
        # clock again: three reads after the step mean it was judged, and two quiet looks after it.
        for _ in range(3):
            assert clocks.after.acquire(timeout=5), "the watch stopped looking"
    assert len(watch.stalls) == 1 and watch.stalls[0].seconds > 11.9
    assert watch.within(1_005.0, 1_006.0) == watch.stalls, "a run inside the stall overlaps it"
    assert watch.within(900.0, 999.0) == [] and watch.within(1_013.0, 1_020.0) == []
    assert describe(watch.stalls) == "the machine stood still 12.0s"
