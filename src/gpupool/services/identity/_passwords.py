"""Password hashing with scrypt (standard library); secrets compared in constant time."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

_N, _R, _P = 2**14, 8, 1
# A hash of no known password, checked against when there is no user (or no password) to
# check, so that such a sign-in takes as long as a wrong password: else timing lists users.
DUMMY_HASH = (
    f"scrypt${_N}${_R}${_P}$Ycn7WejvC136MzTJ2tNR1w==$UCylUez3/iHRLLssqw6hLnDGg/XHU++vS9JeSf4mLQk="
)


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=_N, r=_R, p=_P, dklen=32)
    encoded = (base64.b64encode(part).decode() for part in (salt, digest))
    return "$".join(["scrypt", str(_N), str(_R), str(_P), *encoded])


def verify_password(password: str, stored: str | None) -> bool:
    if not stored or not stored.startswith("scrypt$"):
        return False
    _, n, r, p, salt, digest = stored.split("$")
    candidate = hashlib.scrypt(
        password.encode(), salt=base64.b64decode(salt), n=int(n), r=int(r), p=int(p), dklen=32
    )
    return hmac.compare_digest(candidate, base64.b64decode(digest))


def new_secret(prefix: str) -> str:
    return f"{prefix}_{secrets.token_urlsafe(32)}"


def secret_hash(secret: str) -> str:
    """Tokens carry 256 random bits, so one SHA-256 is enough to store them safely."""
    return hashlib.sha256(secret.encode()).hexdigest()
