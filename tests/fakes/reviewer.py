"""An in-memory `Reviewer` (TokenReview and SubjectAccessReview) for /metrics access."""

from __future__ import annotations

from local_ccm.runtime.metricsauth import ReviewUnavailable, User


class FakeReviewer:
    """Tokens it knows authenticate as their user; `allowed` names who may get /metrics."""

    def __init__(self, users: dict[str, User], allowed: set[str]) -> None:
        self.users, self.allowed = users, allowed
        self.calls: list[str] = []
        self.down = False

    def authenticate(self, token: str) -> User | None:
        self.calls.append("TokenReview")
        if self.down:
            raise ReviewUnavailable("connection refused")
        return self.users.get(token)

    def may_get(self, user: User, path: str) -> bool:
        self.calls.append(f"SubjectAccessReview {path}")
        return user.name in self.allowed
