"""Fixtures of the speaker's tests: the segment and the speakers on it (`segment.py`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.netns.announce.segment import Segment, SpeakerThread, make_segment
from tests.support.netns import Namespace, NetnsFactory


@pytest.fixture
def segment(netns: NetnsFactory) -> Segment:
    """A bridge in a namespace of its own, nothing attached yet."""
    return make_segment(netns)


@pytest.fixture
def speakers(netns: NetnsFactory) -> Iterator[Callable[..., SpeakerThread]]:
    """Makes speakers (``speakers(ns, limit=...)``) and stops every one at the end, failing
    the test if one of them failed; before the namespaces go (it depends on `netns`)."""
    made: list[SpeakerThread] = []

    def make(ns: Namespace, **options: Any) -> SpeakerThread:
        made.append(SpeakerThread(ns, **options))
        return made[-1]

    yield make
    for speaker in made:
        speaker.stop()
