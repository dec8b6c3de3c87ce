"""When the kit's TTL looks (loom/ttl.py): once a period, and after a clock jump at once and
again a little later, for the sweep the jump fired to have stamped what ended."""

from __future__ import annotations

from loom.ttl import AFTER_JUMP_SECONDS, NUDGE_WINDOW, Reaper


def reaper() -> Reaper:
    return Reaper(ddb=None, table="t", attribute="expires_at", clock=lambda: 0.0, period=60.0)


def test_the_first_look_is_at_once_then_once_a_period():
    r = reaper()
    assert r.due(wall=0.0, offset=0.0)
    r._last = (0.0, 0.0)
    assert not r.due(wall=59.0, offset=0.0)
    assert r.due(wall=60.0, offset=0.0)


def test_a_clock_jump_looks_at_once_and_once_more_after_the_sweep_it_fired():
    r = reaper()
    r._last = (0.0, 0.0)
    assert r.due(wall=1.0, offset=31 * 86400.0)  # `loom time advance 31d`
    r._last, r._again_at = (1.0, 31 * 86400.0), 1.0 + AFTER_JUMP_SECONDS
    assert not r.due(wall=2.0, offset=31 * 86400.0)
    assert r.due(wall=1.0 + AFTER_JUMP_SECONDS, offset=31 * 86400.0)


def test_a_table_without_ttl_is_never_reaped():
    r = Reaper(ddb=None, table="t", attribute=None, clock=lambda: 0.0)
    assert r.reap_now() == 0 and r.maybe_reap() == 0


def test_a_sweep_that_stamped_after_a_jump_makes_the_next_poll_look_once(monkeypatch):
    looked: list[float] = []
    wall, offset = [10.0], [0.0]
    r = Reaper(ddb=None, table="t", attribute="expires_at", clock=lambda: offset[0], period=60.0)
    monkeypatch.setattr(r, "reap_now", lambda now=None: looked.append(now) or 0)
    monkeypatch.setattr("loom.ttl.time.monotonic", lambda: wall[0])
    monkeypatch.setattr("loom.ttl.time.time", lambda: 0.0)
    r.maybe_reap()  # the first look
    assert looked == [0.0] and r.maybe_reap() == 0 and looked == [0.0], "nothing due within the period"
    r.nudge()  # a sweep stamped, but no jump: what it stamped expires days on
    r.maybe_reap()
    assert looked == [0.0], "without a jump a nudge waits for the period"
    offset[0] = 31 * 86400.0  # `loom time advance 31d`
    r.maybe_reap()
    assert looked == [0.0, offset[0]]
    r._follow_ups, r._again_at = 0, None  # the jump's follow-ups done
    wall[0] += NUDGE_WINDOW - 1
    r.nudge()  # the sweep the jump fired stamped what ended
    r.maybe_reap()
    assert looked == [0.0, offset[0], offset[0]]
    r.maybe_reap()
    assert len(looked) == 3, "one look per nudge, then the period again"
    wall[0] += 2
    r.nudge()  # past the window: the period again
    r.maybe_reap()
    assert len(looked) == 3
