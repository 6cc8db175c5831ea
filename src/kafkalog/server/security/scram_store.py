"""The SCRAM credentials created over the protocol (AlterUserScramCredentials), durably: the JSON file
:data:`SCRAM_FILE` of the data directory (Kafka keeps them as ``UserScramCredentialRecord`` records in
its metadata log). Stored as Kafka stores them: salt, stored key, server key and iterations, never the
salted password. Each change rewrites the file whole through a temporary file, fsync and rename
(:func:`~kafkalog.log.fsutil.atomic_write`) before it applies and is answered: a crash leaves the old
or the new set, never a torn file. The file is written only once a credential is altered; until then a
directory Kafka 4 wrote serves the credentials of its metadata log
(:func:`~kafkalog.log.cluster_metadata.read_kafka_metadata`)."""

from __future__ import annotations

import base64
import json
import os

from kafkalog.errors import InvalidConfigError
from kafkalog.log import fsutil
from kafkalog.log.cluster_metadata import read_kafka_metadata
from kafkalog.server.security.sasl_credentials import SCRAM_HASHES, ScramCredential

SCRAM_FILE = "kafkalog-scram-credentials.json"
#: mechanism -> user -> credential
Scram = dict[str, dict[str, ScramCredential]]


class ScramStore:
    """``SCRAM_FILE`` of one data directory."""

    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir
        self.path = os.path.join(data_dir, SCRAM_FILE)

    def load(self) -> Scram:
        """The stored credentials (without the file: those of the directory's Kafka metadata log, if any);
        a damaged file is refused, naming it."""
        data = fsutil.read_json(self.path, "SCRAM credentials")
        if data is None:
            out: Scram = {}
            for (mech, user), fields in read_kafka_metadata(self.data_dir).security.scram.items():
                out.setdefault(mech, {})[user] = ScramCredential(*fields)
            return out
        if not isinstance(data, dict) or not isinstance(data.get("credentials"), list):
            raise InvalidConfigError('the SCRAM credential file is not a JSON object with a "credentials" list',
                                     file=self.path)
        out = {}
        for i, e in enumerate(data["credentials"]):
            try:
                if e["mechanism"] not in SCRAM_HASHES or not isinstance(e["user"], str) \
                        or not isinstance(e["iterations"], int):
                    raise ValueError("a field of the wrong type or an unknown mechanism")
                salt, stored_key, server_key = (base64.b64decode(e[k], validate=True)
                                                for k in ("salt", "stored_key", "server_key"))
                cred = ScramCredential(salt, stored_key, server_key, e["iterations"])
            except (KeyError, TypeError, ValueError) as exc:
                raise InvalidConfigError(f"credential #{i} of the file is malformed ({exc})", file=self.path) \
                    from None
            out.setdefault(e["mechanism"], {})[e["user"]] = cred
        return out

    def save(self, scram: Scram) -> None:
        """Replace the stored credentials with ``scram`` (atomic and fsynced)."""
        b64 = base64.b64encode
        doc = {"version": 1, "credentials": [
            {"mechanism": mech, "user": user, "salt": b64(c.salt).decode(), "stored_key": b64(c.stored_key).decode(),
             "server_key": b64(c.server_key).decode(), "iterations": c.iterations}
            for mech in sorted(scram) for user, c in sorted(scram[mech].items())]}
        fsutil.atomic_write(self.path, json.dumps(doc, indent=1).encode("utf-8"))
