"""Node credentials: issue one per node id, find a node by its secret, list, revoke.

The secret (`node.credential`) is shown once; the table keeps its sha256 (to know the node by its
bearer) and the call key derived from it (to sign the api's requests to that node and check its
answers), never the secret. Issuing again for a node id replaces its credential (the old secret stops
working at once); a revoked credential is refused on the node routes and its node is offered no call.
CRUD functions take keyword-only arguments and do not commit.
"""

from __future__ import annotations

import hmac

from sqlmodel import Session, col, select

from api.errors import InvalidRequest
from api.models import NodeCredential, utcnow
from node.credential import LOOKUP_LEN, NODE_ID_RE, call_key, is_node_secret, new_secret, secret_hash


def check_node_id(node_id: str) -> str:
    """`node_id`, or InvalidRequest naming it (1 to 100 of A-Z a-z 0-9 . _ -)."""
    if NODE_ID_RE.match(node_id) is None:
        raise InvalidRequest(
            f"The node id {node_id[:100]!r} is not 1 to 100 letters, digits, '.', '_' or '-'.",
            field="node_id",
        )
    return node_id


def issue_credential(session: Session, *, node_id: str) -> tuple[NodeCredential, str]:
    """A fresh credential for `node_id`, replacing any it had; returns the row and the secret (shown once)."""
    check_node_id(node_id)
    secret = new_secret()
    row = session.get(NodeCredential, node_id) or NodeCredential(
        node_id=node_id, prefix="", secret_hash="", call_key=""
    )
    row.prefix, row.secret_hash, row.call_key = secret[:LOOKUP_LEN], secret_hash(secret), call_key(secret)
    row.created_at, row.revoked_at = utcnow(), None
    session.add(row)
    session.flush()
    return row, secret


def find_credential(session: Session, *, secret: str) -> NodeCredential | None:
    """The credential whose secret this is (revoked ones included), or None."""
    if not is_node_secret(secret):
        return None
    stmt = select(NodeCredential).where(col(NodeCredential.prefix) == secret[:LOOKUP_LEN])
    row = session.exec(stmt).first()
    if row is None or not hmac.compare_digest(row.secret_hash, secret_hash(secret)):
        return None
    return row


def list_credentials(session: Session) -> list[NodeCredential]:
    """Every node credential, by node id."""
    return list(session.exec(select(NodeCredential).order_by(col(NodeCredential.node_id))).all())


def revoke_credential(session: Session, *, node_id: str) -> NodeCredential | None:
    """Mark a node's credential revoked (idempotent: the first revocation time stays); None if it has none."""
    row = session.get(NodeCredential, node_id)
    if row is not None and row.revoked_at is None:
        row.revoked_at = utcnow()
        session.add(row)
        session.flush()
    return row
