"""`LoginCode`: a one-time, short-lived code that logs a browser in to the web console.

`trainyard up` prints one at start and `trainyard console` prints a new one: the link
`<url>/?token=<code>` logs the browser in as the code's user once, then the code is spent.
Only the SHA-256 of a code is stored (as for API tokens); `services/logins.py` issues and
redeems codes, nothing else writes `used_at`.
"""

from __future__ import annotations

from sqlalchemy import ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column, relationship

from trainyard.server.db.base import Base, Timestamp
from trainyard.server.db.tenancy import User


class LoginCode(Base):
    __tablename__ = "login_codes"

    id: Mapped[int] = mapped_column(primary_key=True)
    code_hash: Mapped[str] = mapped_column(String(64), unique=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[float] = mapped_column(Timestamp)
    expires_at: Mapped[float] = mapped_column(Timestamp)
    used_at: Mapped[float | None] = mapped_column(Timestamp, default=None)

    user: Mapped[User] = relationship()
