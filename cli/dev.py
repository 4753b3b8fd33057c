"""Run the development stack in the foreground: the api on 127.0.0.1:8700 with SQLite under .b3os/.

On first start it creates a dev organization (the operator) and a dev key, gives it the publisher
namespace com.example.tools with the signing key com.example.tools#dev (generated into the key
directory, $B3OS_KEYS_DIR or ~/.b3os/keys), builds and publishes the example tools
(examples/tools/*), and writes B3OS_API_URL, B3OS_API_KEY, B3OS_DEV_KID and B3OS_NODE_TOKEN to
.b3os/dev.env. Later starts reuse all of it. Ctrl-C or SIGTERM stops every child.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path

from cli._http import ApiClient, ApiConfig, CliError, read_env_file

DEV_NAMESPACE = "com.example.tools"
DEV_KID = f"{DEV_NAMESPACE}#dev"
REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class DevState:
    """What the dev stack runs with (also written to dev.env)."""

    api_url: str
    api_key: str
    node_token: str
    kid: str = DEV_KID

    def env_lines(self) -> str:
        return (
            f"B3OS_API_URL={self.api_url}\nB3OS_API_KEY={self.api_key}\n"
            f"B3OS_DEV_KID={self.kid}\nB3OS_NODE_TOKEN={self.node_token}\n"
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=8700, help="the api's port on 127.0.0.1 (default 8700)")
    parser.add_argument("--data-dir", type=Path, default=Path(".b3os"), help="the state directory (.b3os)")
    parser.add_argument(
        "--examples",
        type=Path,
        default=REPO / "examples" / "tools",
        help="the tool packs to build and publish (default examples/tools)",
    )


def prepare(data_dir: Path, api_url: str) -> DevState:
    """Create (or reuse) the dev organization, key, publisher and signing key; write dev.env."""
    from sqlmodel import Session, select

    from api import accounts, publishers
    from api.config import Settings
    from api.db import engine_from_settings
    from api.errors import ApiError
    from api.migrations import migrate
    from api.models import Organization, Publisher
    from api.scopes import OWNER_SCOPES
    from packs.errors import PackError
    from packs.signing import generate_key, keys_dir, load_public_key_b64

    dev_env_path = data_dir / "dev.env"
    previous = read_env_file(dev_env_path)
    try:
        public = (
            load_public_key_b64(DEV_KID)
            if (keys_dir() / f"{DEV_KID}.key").exists()
            else generate_key(DEV_KID)
        )
    except PackError as exc:
        raise CliError(f"the dev signing key {DEV_KID}: {exc}") from exc
    engine = engine_from_settings(Settings(data_dir=data_dir))
    try:
        migrate(engine)
        with Session(engine) as session:
            org = session.exec(select(Organization).where(Organization.is_operator == True)).first()  # noqa: E712
            if org is None:
                org = accounts.create_organization(session, name="Development", is_operator=True)
            old = accounts.find_key(session, secret=previous.get("B3OS_API_KEY", ""))
            secret = previous["B3OS_API_KEY"] if old is not None and old.revoked_at is None else None
            if secret is None:
                _, secret = accounts.create_api_key(session, org_id=org.id, scopes=OWNER_SCOPES, name="dev")
            if session.get(Publisher, DEV_NAMESPACE) is None:
                publishers.set_publisher(session, namespace=DEV_NAMESPACE, org_id=org.id)
            try:
                publishers.register_signing_key(
                    session, namespace=DEV_NAMESPACE, kid=DEV_KID, public_key=public
                )
            except ApiError as exc:
                raise CliError(
                    f"{exc.message} The key directory {keys_dir()} holds another {DEV_KID}: "
                    f"remove {data_dir} to start afresh."
                ) from exc
            session.commit()
    finally:
        engine.dispose()
    state = DevState(
        api_url=api_url,
        api_key=secret,
        node_token=previous.get("B3OS_NODE_TOKEN") or secrets.token_urlsafe(32),
    )
    dev_env_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(dev_env_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(state.env_lines())
    return state


def publish_examples(state: DevState, examples: Path, build_root: Path) -> list[str]:
    """Build each tool pack under `examples` into `build_root` and publish it; returns the pins.

    A version already published with the same content is left as it is; one published with other
    content is reported (versions are immutable: bump the example's version to publish a change).
    """
    from cli.tool_publish import publish_dir
    from packs.build import build_tool
    from packs.errors import PackError

    pins: list[str] = []
    with ApiClient(ApiConfig(url=state.api_url, key=state.api_key)) as client:
        for pack_dir in sorted(p for p in examples.iterdir() if (p / "b3pack.json").is_file()):
            try:
                built = build_tool(pack_dir, kid=state.kid, out_dir=build_root / pack_dir.name)
            except PackError as exc:
                raise CliError(f"building {pack_dir}: {exc}") from exc
            pack, version = built.manifest["pack"], built.manifest["version"]
            listed = client.request("GET", f"/v1/actions/packs/{pack}/versions", accept=(200, 404))
            known = {v["version"]: v["content_hash"] for v in listed.json().get("versions", [])}
            if known.get(version) not in (None, built.hash):
                print(f"{pack}@{version} is published with other content: bump its version to publish this")
                continue
            if version not in known:
                publish_dir(client, build_root / pack_dir.name, say=lambda _line: None)
            pins.extend(f"{pack}/{a['key']}@{version}" for a in built.manifest["actions"])
    return pins


def _healthy(url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def run(args: argparse.Namespace) -> int:
    from cli.stack import Stack, StackError

    data_dir: Path = args.data_dir.resolve()
    api_url = f"http://127.0.0.1:{args.port}"
    stack = Stack(data_dir / "logs")
    stack.install_signal_handlers()
    try:
        state = prepare(data_dir, api_url)
        env = {**os.environ, "B3OS_DATA_DIR": str(data_dir), "B3OS_NODE_TOKEN": state.node_token}
        stack.start(
            "api",
            [
                sys.executable,
                "-m",
                "uvicorn",
                "--factory",
                "api.main:create_app",
                "--host",
                "127.0.0.1",
                "--port",
                str(args.port),
            ],
            env=env,
            ready=lambda: _healthy(api_url),
        )
        pins = publish_examples(state, args.examples, data_dir / "build")
    except (CliError, StackError) as exc:
        print(f"b3os dev: {exc}", file=sys.stderr)
        stack.stop()
        return 1
    print(f"api      {api_url}  (OpenAPI docs at {api_url}/docs)")
    print(f"env      {data_dir / 'dev.env'}  (B3OS_API_URL, B3OS_API_KEY, B3OS_DEV_KID, B3OS_NODE_TOKEN)")
    print(f"logs     {data_dir / 'logs'}")
    for pin in pins:
        print(f"published {pin}")
    print("ready: Ctrl-C stops everything", flush=True)
    code = stack.wait()
    stack.stop()
    return code
