"""The CLI's ETA line: the service's interval, shown as this host's time (no clock crosses hosts)."""
from __future__ import annotations

from datetime import datetime, timedelta

from smdcli.remote import _seconds_between, eta_text


def test_an_eta_is_the_services_interval_on_this_hosts_clock():
    before = datetime.now().astimezone()
    text = eta_text(3725.4)
    after = datetime.now().astimezone()
    assert text.endswith("(in 1:02:05)"), text
    shown = text.split()[1]
    assert shown in {(t + timedelta(seconds=3725)).strftime("%H:%M:%S") for t in (before, after)}, text
    assert eta_text(-3).endswith("(in 0:00:00)")   # due: not negative
    assert eta_text(None) == "eta —"


def test_seconds_between_two_of_the_services_times():
    assert _seconds_between("2026-11-28T11:04:08.000000Z", "2026-11-28T11:04:16.500000Z") == 8.5
