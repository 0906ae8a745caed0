"""wake(): a reconcile loop runs at once when another handler has just written its object."""

import asyncio

from switchyard.handlers import loop as common


class Stopped:
    """The part of kopf's DaemonStopped the loop's pause uses."""

    def __init__(self):
        self.flag = asyncio.Event()

    async def wait(self, timeout):
        try:
            await asyncio.wait_for(self.flag.wait(), timeout)
        except asyncio.TimeoutError:
            pass


def test_pause_reports_a_wake_and_a_timeout():
    async def scenario():
        woken = asyncio.Event()
        loop = asyncio.get_running_loop()
        common._wakers[("WorkerFleet", "ns", "w")] = (loop, woken)
        try:
            loop.call_later(0.05, common.wake, "WorkerFleet", "ns", "w")
            assert await common._pause(Stopped(), woken, 30) is True
            assert not woken.is_set()
            assert await common._pause(Stopped(), woken, 0.05) is False
        finally:
            del common._wakers[("WorkerFleet", "ns", "w")]

    asyncio.run(scenario())


def test_a_wake_before_the_loop_starts_is_kept_for_it_only_for_looping_kinds():
    common._looping_kinds.add("WorkerFleet")
    common.wake("WorkerFleet", "ns", "early")
    common.wake("Deployment", "ns", "early")  # no loop will ever take it
    assert ("WorkerFleet", "ns", "early") in common._pending_wakes
    assert ("Deployment", "ns", "early") not in common._pending_wakes
    common._pending_wakes.clear()


def test_an_unexpected_error_is_one_log_line_and_a_condition(monkeypatch):
    written, lines = [], []

    class Logger:
        def error(self, text):
            lines.append(text)

    monkeypatch.setattr(common, "write_status", lambda kind, body, status, states, logger: written.append(states))
    common.report_failure("XCachePool", {}, ValueError("bad\nvalue"), Logger())
    assert written[0]["Ready"].reason == "ReconcileFailed" and "ValueError" in written[0]["Ready"].message
    assert len(lines) == 1 and "\n" not in lines[0]

    def failing(*_):
        raise RuntimeError("status write refused")
    monkeypatch.setattr(common, "write_status", failing)
    common.report_failure("XCachePool", {}, ValueError("x"), Logger())
    assert "status write refused" in lines[-1]
