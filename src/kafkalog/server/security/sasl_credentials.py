"""The SASL users of ``kafkalog serve``: the file named by ``sasl.credentials.file``.

Java-properties syntax (``#`` comments), one entry per line::

    # a password: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 all accept it
    user.alice=alice-secret
    # a SCRAM credential stored salted, as Kafka stores them (no password in the file):
    scram-sha-256.bob=salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=8192
    scram-sha-512.bob=salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=8192

A user named only by ``scram-sha-*`` lines authenticates with those mechanisms only (PLAIN needs
the password). For a ``user.`` password the SCRAM credentials are derived when the file is loaded
(a random salt, :data:`DEFAULT_ITERATIONS`). :func:`scram_credential` makes a salted line.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass

from kafkalog.errors import InvalidConfigError
from kafkalog.log.config import parse_properties

#: mechanism -> hashlib name (RFC 5802 / RFC 7677)
SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: Kafka's default and minimum SCRAM iteration count
DEFAULT_ITERATIONS = 4096
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def format(self) -> str:
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")


def scram_credential(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS,
                     salt: bytes | None = None) -> ScramCredential:
    """RFC 5802: SaltedPassword = Hi(password, salt, i); StoredKey = H(HMAC(SaltedPassword,
    "Client Key")); ServerKey = HMAC(SaltedPassword, "Server Key")."""
    h = SCRAM_HASHES[mechanism]
    salt = salt if salt is not None else os.urandom(16)
    salted = hashlib.pbkdf2_hmac(h, password.encode("utf-8"), salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", h)
    return ScramCredential(salt, hashlib.new(h, client_key).digest(),
                           hmac.digest(salted, b"Server Key", h), iterations)


def _parse_scram(text: str, where: str) -> ScramCredential:
    fields: dict[str, str] = {}
    for part in text.split(","):
        k, sep, v = part.strip().partition("=")
        if not sep:
            raise InvalidConfigError(f"{where}: expected salt=...,stored_key=...,server_key=...,"
                                     f"iterations=N")
        fields[k] = v
    try:
        cred = ScramCredential(base64.b64decode(fields["salt"], validate=True),
                               base64.b64decode(fields["stored_key"], validate=True),
                               base64.b64decode(fields["server_key"], validate=True),
                               int(fields["iterations"]))
    except (KeyError, ValueError) as e:
        raise InvalidConfigError(f"{where}: expected salt=<base64>,stored_key=<base64>,"
                                 f"server_key=<base64>,iterations=N ({type(e).__name__}: {e})") \
            from None
    if not MIN_ITERATIONS <= cred.iterations <= MAX_ITERATIONS:
        raise InvalidConfigError(f"{where}: iterations must be between {MIN_ITERATIONS} and "
                                 f"{MAX_ITERATIONS} (Kafka's bounds)")
    return cred


class Credentials:
    """Users' passwords and SCRAM credentials."""

    def __init__(self, passwords: dict[str, str], scram: dict[str, dict[str, ScramCredential]]) -> None:
        self.passwords = passwords
        self.scram = scram
        #: the broker's credentials of AlterUserScramCredentials (:meth:`manage`), looked up first
        self.managed: dict[str, dict[str, ScramCredential]] = {}
        for user, pw in passwords.items():
            for mech in SCRAM_HASHES:
                self.scram.setdefault(mech, {}).setdefault(user, scram_credential(mech, pw))

    def password(self, user: str) -> str | None:
        return self.passwords.get(user)

    def manage(self, managed: dict[str, dict[str, ScramCredential]]) -> None:
        """Look up ``managed`` (mechanism -> user -> credential, kept up to date by its owner) first."""
        self.managed = managed

    def scram_credential(self, mechanism: str, user: str) -> ScramCredential | None:
        cred = self.managed.get(mechanism, {}).get(user)
        return cred if cred is not None else self.scram.get(mechanism, {}).get(user)

    @classmethod
    def load(cls, path: str) -> Credentials:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise InvalidConfigError(f"sasl.credentials.file={path}: cannot read it: {e}") from None
        passwords: dict[str, str] = {}
        scram: dict[str, dict[str, ScramCredential]] = {}
        for key, value in parse_properties(text, file=path).items():
            prefix, _dot, user = key.partition(".")
            where = f"sasl.credentials.file={path}, entry {key!r}"
            if not user:
                raise InvalidConfigError(f"{where}: expected user.NAME=password or "
                                         f"scram-sha-256.NAME=... / scram-sha-512.NAME=...")
            if prefix == "user":
                if not value:
                    raise InvalidConfigError(f"{where}: empty password")
                passwords[user] = value
            elif prefix.upper() in SCRAM_HASHES:
                scram.setdefault(prefix.upper(), {})[user] = _parse_scram(value, where)
            else:
                raise InvalidConfigError(f"{where}: unknown prefix {prefix!r} (expected user., "
                                         f"scram-sha-256. or scram-sha-512.)")
        return cls(passwords, scram)
