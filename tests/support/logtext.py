"""Reading our processes' logs in tests."""

from __future__ import annotations

import re


def answer_pattern(status: int, reason: str) -> re.Pattern[str]:
    """An API answer `status` as our logs show it ("403 Forbidden: …"), the status as a number
    of its own: not a timestamp's milliseconds (12:00:40.403Z) nor three digits of a generated
    name (t-…-f40315); or the reason's word anywhere."""
    return re.compile(rf"(?<![\w.]){status}(?![\w.])|{re.escape(reason)}")
