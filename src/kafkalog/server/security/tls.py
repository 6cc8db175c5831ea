"""TLS for the ``SSL`` and ``SASL_SSL`` listeners: an :class:`ssl.SSLContext` from Kafka's ``ssl.*``
broker keys.

Key store: ``ssl.keystore.type=PEM`` with ``ssl.keystore.location`` (a PEM file holding the
certificate chain and the private key) or the PEM text itself in ``ssl.keystore.certificate.chain``
and ``ssl.keystore.key``; ``ssl.key.password`` decrypts an encrypted key. ``PKCS12`` key stores are
read with the ``cryptography`` package when it is installed (``ssl.keystore.password``). JKS is a
Java format: refused with an error that says to convert it to PEM.

Trust store (the CAs that sign client certificates, for ``ssl.client.auth``): ``ssl.truststore.type=PEM``
with ``ssl.truststore.location`` or ``ssl.truststore.certificates``. ``ssl.client.auth`` is Kafka's
``none`` / ``requested`` / ``required`` (SSL listeners only: SASL_SSL ignores it, as in Kafka);
``ssl.enabled.protocols`` bounds the TLS versions.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from typing import Any

from kafkalog.errors import InvalidConfigError
from kafkalog.log.fsutil import read_bytes
from kafkalog.server.config import SASL_SSL, SSL

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def _store_type(values: dict[str, Any], kind: str, has_store: bool) -> str:
    t = str(values[f"ssl.{kind}.type"]).upper()
    if t == "JKS" and has_store:
        raise InvalidConfigError(
            f"ssl.{kind}.type=JKS: Java key stores are not read by kafkalog; convert the store to "
            f"PEM (keytool -importkeystore -deststoretype PKCS12, then openssl pkcs12 -nodes) and "
            f"set ssl.{kind}.type=PEM")
    return t


def _read(path: str, key: str) -> bytes:
    return read_bytes(path, lambda e: InvalidConfigError(f"{key}={path}: {e.strerror or e}"))


def _pkcs12_to_pem(data: bytes, password: str | None, key: str) -> tuple[bytes, bytes | None]:
    """(PEM certificates, PEM unencrypted key or None) of a PKCS12 store, via ``cryptography``."""
    try:
        from cryptography.hazmat.primitives.serialization import (
            Encoding,
            NoEncryption,
            PrivateFormat,
            pkcs12,
        )
    except ImportError:
        raise InvalidConfigError(f"{key}: PKCS12 stores need the 'cryptography' package; install it "
                                 f"or convert the store to PEM (ssl.*.type=PEM)") from None
    try:
        pkey, cert, extra = pkcs12.load_key_and_certificates(
            data, password.encode() if password else None)
    except ValueError as e:
        raise InvalidConfigError(f"{key}: cannot read the PKCS12 store (wrong ssl.*.password?): "
                                 f"{e}") from None
    certs = ([cert] if cert is not None else []) + list(extra or [])
    pem = b"".join(c.public_bytes(Encoding.PEM) for c in certs)
    key_pem = (pkey.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
               if pkey is not None else None)
    return pem, key_pem


def _load_chain(ctx: ssl.SSLContext, chain: bytes, key_pem: bytes, password: str | None,
                what: str) -> None:
    """``load_cert_chain`` takes files only: a private temporary file, removed at once."""
    fd, path = tempfile.mkstemp(prefix="kafkalog-tls-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(chain.rstrip(b"\n") + b"\n" + key_pem)
        ctx.load_cert_chain(path, password=password)
    except ssl.SSLError as e:
        raise InvalidConfigError(f"{what}: cannot load the certificate chain and key: {e}") from None
    finally:
        os.unlink(path)


def listener_contexts(values: dict[str, Any], protocols: set[str]) -> dict[str, ssl.SSLContext]:
    """security protocol -> context for the TLS ones in ``protocols``. ``ssl.client.auth`` applies
    to SSL listeners; SASL_SSL listeners authenticate with SASL and ignore it, as Kafka does
    (KIP-684 makes that a per-listener setting, which kafkalog does not serve)."""
    out: dict[str, ssl.SSLContext] = {}
    if SSL in protocols:
        out[SSL] = server_context(values)
    if SASL_SSL in protocols:
        out[SASL_SSL] = server_context(values, client_auth=False)
    return out


def server_context(values: dict[str, Any], client_auth: bool = True) -> ssl.SSLContext:
    """The server-side context of a TLS listener; :class:`InvalidConfigError` naming the key for
    a missing, unreadable or unsupported key or trust store. ``client_auth=False`` ignores
    ``ssl.client.auth``."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    enabled = [str(p) for p in values["ssl.enabled.protocols"]]
    unknown = [p for p in enabled if p not in _VERSIONS]
    if unknown or not enabled:
        raise InvalidConfigError(f"Invalid value {','.join(enabled)!r} for configuration "
                                 f"ssl.enabled.protocols: supported are TLSv1.2, TLSv1.3")
    ctx.minimum_version = min((_VERSIONS[p] for p in enabled), key=lambda v: v.value)
    ctx.maximum_version = max((_VERSIONS[p] for p in enabled), key=lambda v: v.value)

    location = values["ssl.keystore.location"]
    chain, key_text = values["ssl.keystore.certificate.chain"], values["ssl.keystore.key"]
    key_password = values["ssl.key.password"]
    ktype = _store_type(values, "keystore", bool(location or chain))
    if location and (chain or key_text):
        raise InvalidConfigError("ssl.keystore.location and ssl.keystore.certificate.chain/"
                                 "ssl.keystore.key are exclusive: set one form")
    if location:
        data = _read(location, "ssl.keystore.location")
        if ktype == "PKCS12":
            pem, pkey = _pkcs12_to_pem(data, values["ssl.keystore.password"],
                                       f"ssl.keystore.location={location}")
            if pkey is None:
                raise InvalidConfigError(f"ssl.keystore.location={location}: no private key in it")
            _load_chain(ctx, pem, pkey, None, f"ssl.keystore.location={location}")
        else:
            try:
                ctx.load_cert_chain(location, password=key_password)
            except ssl.SSLError as e:
                raise InvalidConfigError(
                    f"ssl.keystore.location={location}: cannot load a PEM certificate chain and "
                    f"private key (wrong ssl.key.password?): {e}") from None
    elif chain or key_text:
        if not (chain and key_text) or ktype != "PEM":
            raise InvalidConfigError("ssl.keystore.certificate.chain and ssl.keystore.key go "
                                     "together, with ssl.keystore.type=PEM")
        _load_chain(ctx, chain.encode(), key_text.encode(), key_password,
                    "ssl.keystore.certificate.chain")
    else:
        raise InvalidConfigError("an SSL or SASL_SSL listener needs a key store: set "
                                 "ssl.keystore.type=PEM and ssl.keystore.location (or "
                                 "ssl.keystore.certificate.chain and ssl.keystore.key)")

    tlocation, tcerts = values["ssl.truststore.location"], values["ssl.truststore.certificates"]
    ttype = _store_type(values, "truststore", bool(tlocation or tcerts))
    if tlocation:
        data = _read(tlocation, "ssl.truststore.location")
        if ttype == "PKCS12":
            data, _k = _pkcs12_to_pem(data, values["ssl.truststore.password"],
                                      f"ssl.truststore.location={tlocation}")
        _load_cas(ctx, data.decode("ascii", "replace"), f"ssl.truststore.location={tlocation}")
    elif tcerts:
        _load_cas(ctx, tcerts, "ssl.truststore.certificates")
    auth = values["ssl.client.auth"] if client_auth else "none"
    if auth != "none" and not (tlocation or tcerts):
        raise InvalidConfigError(f"ssl.client.auth={auth} needs a trust store of the client "
                                 f"certificates' CAs: set ssl.truststore.location")
    ctx.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                       "required": ssl.CERT_REQUIRED}[auth]
    return ctx


def _load_cas(ctx: ssl.SSLContext, pem: str, what: str) -> None:
    try:
        ctx.load_verify_locations(cadata=pem)
    except (ssl.SSLError, ValueError) as e:
        raise InvalidConfigError(f"{what}: cannot load the PEM CA certificates: {e}") from None
