"""Hosts for cluster tests: the ``netns_hosts`` fixture over ``azserve.perf.netns``.

- ``netns_hosts`` (pytest fixture): a factory ``netns_hosts(n) -> NetnsLan``; everything it made
  is torn down after the test, pass or fail. Call it more than once for separate LANs. Tests
  that use it are marked ``cluster`` and skip with the reason where namespaces cannot be made.
- ``NetnsHost``, ``NetnsLan``, ``make_lan``, ``destroy_lan``, ``unavailable``: re-exported from
  the product module (its docstring gives the layout).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from azserve.perf.netns import NetnsHost, NetnsLan, destroy_lan, make_lan, unavailable

__all__ = ["NetnsHost", "NetnsLan", "destroy_lan", "make_lan", "netns_hosts", "unavailable"]


@pytest.fixture
def netns_hosts() -> Iterator[Callable[[int], NetnsLan]]:
    """Factory ``netns_hosts(n) -> NetnsLan`` (skips when namespaces cannot be made); every LAN
    made is destroyed after the test, whatever its outcome."""
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    made: list[NetnsLan] = []

    def factory(n: int) -> NetnsLan:
        lan = make_lan(n)
        made.append(lan)
        return lan

    yield factory
    for lan in made:
        destroy_lan(lan)
