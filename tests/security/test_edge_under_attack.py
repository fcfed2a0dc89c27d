"""The issue's must-show: under attack, others are still served.

With 200 slowloris sockets, 10 clients that stop reading their streams and three 100 MB bodies in
flight at once, a normal client's chat request still succeeds within 2 s and the gateway's RSS
stays under 200 MB. The gateway runs with its defaults (as before the fix, which buffered the
bodies whole: 719 MB and more), in front of a simulated HTTP worker with a steady token rate, so
the streams stay open.
"""

from __future__ import annotations

import time

import pytest
from integration.conftest import Launcher, wait_until

from .edge_attacks import BigBody, NonReaders, RssWatch, Slowloris, rss_mb

pytestmark = pytest.mark.serial  # times a normal client under a flood

MSGS = [{"role": "user", "content": "are you still there?"}]


def test_under_attack_a_normal_client_is_served_within_2_s(launch: Launcher) -> None:
    sim = launch.sim("m", tokens_per_second=20)
    gw = launch.gateway([sim])
    base = rss_mb(gw)
    slowloris = Slowloris(gw.port, 200, every_s=3.0).start()
    readers = NonReaders(gw.port, 10).start()
    bodies = [BigBody(gw.port, 100, mb_per_s=25) for _ in range(3)]  # chunked: ~4 s each
    latencies: list[float] = []
    try:
        wait_until(lambda: sim.stats()["in_flight"] >= 10, 10.0, "the 10 streams running")
        with RssWatch(gw).watching() as rss:
            for b in bodies:
                b.start()
            wait_until(
                lambda: all(b.sent > 8 * 2**20 for b in bodies), 10.0, "the bodies on their way"
            )
            deadline = time.monotonic() + 8.0
            with gw.client(timeout_s=10) as client:
                while time.monotonic() < deadline:  # a chat request every ~0.5 s meanwhile
                    started = time.monotonic()
                    out = client.chat.completions.create(model="m", messages=MSGS, max_tokens=3)
                    latencies.append(time.monotonic() - started)
                    assert out.choices[0].message.content
                    time.sleep(0.5)
            assert slowloris.open_count() > 0 and readers.closed_count() < 10  # still attacking
            for b in bodies:
                b.join(90)
        assert [b.status for b in bodies] == [413] * 3, [(b.status, b.error) for b in bodies]
    finally:
        slowloris.close()
        readers.close()
    assert max(latencies) < 2.0, latencies
    assert rss.peak_mb < 200, (base, rss.peak_mb)
