"""A node's credential and the proofs made with it, on both sides of the node seam (standard library only).

An operator issues each node its own secret (`b3os node credential issue NODE_ID`: `b3n_` + 40 base62
characters), bound to that node id. Two values are derived from it, and the api stores only those:

- `secret_hash(secret)`, its sha256: the node sends the secret as `Authorization: Bearer <secret>` on the
  api's node routes, and the api finds the credential (and so the node id) by it, like an API key;
- `call_key(secret)`, HMAC-SHA256 of the secret over a fixed label: both sides sign the api's requests to
  the node and the node's answers with it. The api holds it to prove it is the api; it does not give back
  the secret, so it cannot authenticate as the node.

A request from the api to a node carries `X-B3os-Node` (the node id it means), `X-B3os-Timestamp` (unix
seconds), `X-B3os-Nonce` (random) and `X-B3os-Proof`: hex HMAC over the node id, method, path, timestamp,
nonce and the body's sha256. The node accepts it only for its own id, within `SKEW_S` of its clock, and
once (`ProofChecker` remembers each proof it accepted until its timestamp is `SKEW_S` old). Its answer
carries `X-B3os-Answer-Proof`: hex HMAC over the node id, the request's proof, the status and the body's
sha256, so the api believes an answer only from the node it called, and only for the request it sent.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import string
import time
from collections.abc import Callable, Mapping

PREFIX = "b3n_"
LOOKUP_LEN = len(PREFIX) + 8
NODE_ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
SKEW_S = 300
NODE_HEADER = "X-B3os-Node"
TIMESTAMP_HEADER = "X-B3os-Timestamp"
NONCE_HEADER = "X-B3os-Nonce"
PROOF_HEADER = "X-B3os-Proof"
ANSWER_PROOF_HEADER = "X-B3os-Answer-Proof"
_ALPHABET = string.ascii_letters + string.digits
_CALL_KEY_LABEL = b"b3os-node-call-key-v1"


def new_secret() -> str:
    """A fresh node secret (~238 bits)."""
    return PREFIX + "".join(secrets.choice(_ALPHABET) for _ in range(40))


def is_node_secret(token: str) -> bool:
    """Whether `token` has the shape of a node secret (not an API key)."""
    return token.startswith(PREFIX) and len(token) > LOOKUP_LEN


def secret_hash(secret: str) -> str:
    """The stored form of a secret: sha256, lowercase hex."""
    return hashlib.sha256(secret.encode()).hexdigest()


def call_key(secret: str) -> str:
    """The key the api and the node sign the call traffic with (hex)."""
    return hmac.new(secret.encode(), _CALL_KEY_LABEL, hashlib.sha256).hexdigest()


def _mac(key: str, *parts: str) -> str:
    return hmac.new(bytes.fromhex(key), "\n".join(parts).encode(), hashlib.sha256).hexdigest()


def _body_hash(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def request_proof(
    key: str, *, node_id: str, method: str, path: str, timestamp: str, nonce: str, body: bytes
) -> str:
    """The api's proof of one request to a node."""
    return _mac(
        key, "b3os-node-request-v1", node_id, method.upper(), path, timestamp, nonce, _body_hash(body)
    )


def answer_proof(key: str, *, node_id: str, proof: str, status: int, body: bytes) -> str:
    """The node's proof of its answer to the request that carried `proof`."""
    return _mac(key, "b3os-node-answer-v1", node_id, proof, str(status), _body_hash(body))


def signed_headers(
    key: str, *, node_id: str, method: str, path: str, body: bytes, now: float | None = None
) -> dict[str, str]:
    """The headers that prove a request to node `node_id` comes from the api."""
    timestamp, nonce = str(int(time.time() if now is None else now)), secrets.token_hex(16)
    proof = request_proof(
        key, node_id=node_id, method=method, path=path, timestamp=timestamp, nonce=nonce, body=body
    )
    return {NODE_HEADER: node_id, TIMESTAMP_HEADER: timestamp, NONCE_HEADER: nonce, PROOF_HEADER: proof}


def answer_is_proven(
    key: str, *, node_id: str, proof: str, status: int, body: bytes, headers: Mapping[str, str]
) -> bool:
    """Whether an answer carries the node's proof for the request that carried `proof`."""
    given = headers.get(ANSWER_PROOF_HEADER, "")
    expected = answer_proof(key, node_id=node_id, proof=proof, status=status, body=body)
    return hmac.compare_digest(given.encode(), expected.encode())


class ProofChecker:
    """The node's side: accepts each request proven for this node once, within `skew_s` of its clock.

    A proof signs its timestamp, so a replay carries the same one: the proofs accepted are kept by their
    timestamp (the first 8 bytes of each, as an int: about 70 bytes a call), and a second's are dropped
    once its requests are refused for their timestamp anyway. At 100 calls a second that is ~4 MiB.
    """

    def __init__(
        self, secret: str, node_id: str, *, skew_s: float = SKEW_S, clock: Callable[[], float] = time.time
    ) -> None:
        self.node_id = node_id
        self._key = call_key(secret)
        self._skew_s, self._clock = skew_s, clock
        self._seen: dict[int, set[int]] = {}  # by the requests' timestamp: their proofs accepted
        self._next_forget = 0.0

    def check(self, *, method: str, path: str, headers: Mapping[str, str], body: bytes) -> str | None:
        """None when the request is proven; else the sentence saying why it is refused."""
        given_node = headers.get(NODE_HEADER, "")
        proof = headers.get(PROOF_HEADER, "")
        timestamp = headers.get(TIMESTAMP_HEADER, "")
        nonce = headers.get(NONCE_HEADER, "")
        if not proof or not given_node or not nonce or not timestamp.isdigit():
            names = ", ".join((NODE_HEADER, TIMESTAMP_HEADER, NONCE_HEADER, PROOF_HEADER))
            return f"The request has no proof of the api ({names})."
        if given_node != self.node_id:
            return f"The request is for node {given_node[:100]!r}, not this node ({self.node_id})."
        now = self._clock()
        if abs(now - int(timestamp)) > self._skew_s:
            skew = f"{self._skew_s:.0f} s"
            return f"The request's timestamp {timestamp[:20]} is more than {skew} from this node's clock."
        expected = request_proof(
            self._key,
            node_id=self.node_id,
            method=method,
            path=path,
            timestamp=timestamp,
            nonce=nonce,
            body=body,
        )
        if not hmac.compare_digest(proof.encode(), expected.encode()):
            return "The request's proof is not the api's for this node."
        accepted = self._seen.setdefault(int(timestamp), set())
        short = int(proof[:16], 16)  # the proof is the expected one: hex digits
        if short in accepted:
            return "The request was already received (a replay)."
        accepted.add(short)
        self._forget(now)
        return None

    @property
    def remembered(self) -> int:
        """How many accepted proofs it keeps to refuse their replay."""
        return sum(len(proofs) for proofs in self._seen.values())

    def _forget(self, now: float) -> None:
        """About once a second: drop the proofs of timestamps this clock now refuses (a clock set back
        drops those too: they are as far ahead of it)."""
        if 0 <= self._next_forget - now <= 1:
            return
        self._next_forget = now + 1
        for stamp in [t for t in self._seen if abs(now - t) > self._skew_s]:
            del self._seen[stamp]

    def answer_headers(self, *, proof: str, status: int, body: bytes) -> dict[str, str]:
        """The proof of this node's answer to the request that carried `proof`."""
        value = answer_proof(self._key, node_id=self.node_id, proof=proof, status=status, body=body)
        return {ANSWER_PROOF_HEADER: value}
