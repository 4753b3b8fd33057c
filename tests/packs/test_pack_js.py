# ruff: noqa: E501
"""JavaScript actions in the manifest (checks 33 to 35) and their code in the bundle: build, verify, publish."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from packfixtures import REPO
from test_pack_checks import DELETE, mutate

from packs.build import build_pack
from packs.checks import run_checks
from packs.errors import ChecksFailed, ManifestError
from packs.js_files import missing_entries
from packs.loader import load_built_bundle
from packs.manifest import JsImpl, parse_manifest
from packs.verify import verify_pack_dir

GH_DIR = REPO / "examples" / "packs" / "github"
GH = json.loads((GH_DIR / "b3pack.json").read_text())
JS = 2  # the index of list-open-issues
IO_KID = "io.b3os#test"

JS_CASES: list[tuple[dict[str, Any], dict[str, Any], list[str]]] = [
    (
        GH,
        {f"actions[{JS}].impl.entry": "src/index.js"},
        [
            f'check 33: actions[{JS}].impl.entry "src/index.js" is not accepted: use the path of a .js or .mjs file under js/, such as "js/index.js"'
        ],
    ),
    (
        GH,
        {f"actions[{JS}].impl.entry": "js/../../etc/passwd.js"},
        [
            f'check 33: actions[{JS}].impl.entry "js/../../etc/passwd.js" is not accepted: use the path of a .js or .mjs file under js/, such as "js/index.js"'
        ],
    ),
    (
        GH,
        {f"actions[{JS}].impl.export": "list-issues", f"actions[{JS}].impl.cmd": ["/tool/x"]},
        [
            f'check 33: actions[{JS}].impl.export "list-issues" is not accepted: use the name of the exported function, such as "run"',
            f'check 33: actions[{JS}].impl.cmd ["/tool/x"] is not accepted: a js impl has only kind, entry, export and errors',
        ],
    ),
    (
        GH,
        {f"actions[{JS}].impl.export": DELETE},
        [
            f'check 33: actions[{JS}].impl.export is missing: use the name of the exported function, such as "run"'
        ],
    ),
    (
        GH,
        {
            f"actions[{JS}].impl.errors": [
                {"code": "NotFound"},
                {"code": "x", "retryable": "yes"},
                {"code": "404"},
            ]
        },
        [
            f'check 33: actions[{JS}].impl.errors[0].code "NotFound" is not accepted: use a unique code of 1 to 60 lowercase letters, digits, "_" and "-", starting with a letter, such as "not_found"',
            f'check 33: actions[{JS}].impl.errors[1].retryable "yes" is not accepted: use true or false',
            f'check 33: actions[{JS}].impl.errors[2].code "404" is not accepted: use a unique code of 1 to 60 lowercase letters, digits, "_" and "-", starting with a letter, such as "not_found"',
        ],
    ),
    (
        GH,
        {
            f"actions[{JS}].inputSchema.properties.file": {
                "type": "object",
                "x-b3os-file": {"accept": ["text/plain"]},
            }
        },
        [
            f'check 33: actions[{JS}].inputSchema.properties.file.x-b3os-file {{"accept": ["text/plain"]}} is not accepted: a js action takes and returns no files: pass data as JSON values'
        ],
    ),
    (
        GH,
        {"pack": "com.example/github", "publisher": {"id": "com.example", "name": "Example"}},
        [
            f'check 34: actions[{JS}].impl.kind "js" is not accepted: js actions are published by first-party namespaces only ("io.b3os"); write the action as "http"'
        ],
    ),
]


@pytest.mark.parametrize(("base", "changes", "expected"), JS_CASES)
def test_a_js_impl_refusal_names_the_field_and_value(
    base: dict[str, Any], changes: dict[str, Any], expected: list[str]
) -> None:
    assert [v.message for v in run_checks(mutate(base, changes))] == expected


def test_the_example_js_action_passes_every_check_and_models() -> None:
    assert run_checks(GH) == []
    impl = parse_manifest(GH).actions[JS].impl
    assert isinstance(impl, JsImpl)
    assert (impl.entry, impl.export, [e.code for e in impl.errors]) == (
        "js/issues.js",
        "listOpenIssues",
        ["repo_not_found", "bad_credentials", "rate_limited"],
    )


def test_an_operator_listed_namespace_may_publish_js() -> None:
    other = mutate(GH, {"pack": "com.example/github", "publisher": {"id": "com.example", "name": "Example"}})
    assert run_checks(other, first_party=("com.example",)) == []


def test_a_js_action_may_require_connections_and_a_vm_action_still_may_not() -> None:
    assert run_checks(mutate(GH, {f"actions[{JS}].connections": ["token"]})) == []


@pytest.fixture
def gh_copy(tmp_path: Path) -> Path:
    dest = tmp_path / "github"
    shutil.copytree(GH_DIR, dest)
    return dest


def _build(src: Path, out: Path, key: Ed25519PrivateKey) -> None:
    build_pack(src, kid=IO_KID, out_dir=out, private_key=key)


def test_build_bundles_the_js_files_reproducibly(gh_copy: Path, tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    _build(gh_copy, tmp_path / "a", key)
    (gh_copy / "js" / "issues.js").touch()  # another mtime: the same bytes
    _build(gh_copy, tmp_path / "b", key)
    manifest, files = load_built_bundle(tmp_path / "a")
    assert sorted(files) == ["js/issues.js", "js/links.js"]
    assert files["js/issues.js"] == (GH_DIR / "js" / "issues.js").read_bytes()
    assert (tmp_path / "a" / "b3pack.json").read_bytes() == (tmp_path / "b" / "b3pack.json").read_bytes()
    assert missing_entries(manifest, set(files)) == []


def test_changing_one_byte_of_the_code_fails_verify(gh_copy: Path, tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    _build(gh_copy, tmp_path / "a", key)
    from packs.signing import public_key_b64

    path = tmp_path / "a" / "js" / "links.js"
    path.write_bytes(path.read_bytes().replace(b"null", b"nul!", 1))
    report = verify_pack_dir(tmp_path / "a", public_key_b64=public_key_b64(key.public_key()))
    assert any("hash" in p for p in report.problems), report.problems


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (
            None,
            f'check 35: actions[{JS}].impl.entry "js/issues.js" is not a file of the pack\'s js/',
        ),
        (
            "export async function listOpenIssues( {",
            f'check 35: actions[{JS}].impl.entry "js/issues.js" is not accepted: js/issues.js does not parse as an ES module: Unexpected end of input',
        ),
        (
            'import fs from "node:fs";\nexport function listOpenIssues() {}',
            f'check 35: actions[{JS}].impl.entry "js/issues.js" is not accepted: js/issues.js imports "node:fs": a pack\'s code imports only its own files, by a relative path',
        ),
        (
            'import { x } from "../../secret.js";\nexport function listOpenIssues() {}',
            f'check 35: actions[{JS}].impl.entry "js/issues.js" is not accepted: js/issues.js imports "../../secret.js", which is not a file under js/ of the pack',
        ),
        (
            "export function listIssues() {}\nexport const n = 1;",
            f'check 35: actions[{JS}].impl.export "listOpenIssues" is not accepted: js/issues.js exports listIssues, n',
        ),
    ],
)
def test_build_refuses_an_entry_that_is_missing_does_not_parse_or_lacks_the_export(
    gh_copy: Path, tmp_path: Path, code: str | None, expected: str
) -> None:
    entry = gh_copy / "js" / "issues.js"
    if code is None:
        entry.unlink()
    else:
        entry.write_text(code)
    with pytest.raises(ChecksFailed) as exc:
        _build(gh_copy, tmp_path / "out", Ed25519PrivateKey.generate())
    assert [v.message for v in exc.value.violations] == [expected]


def test_the_build_evaluates_no_code(gh_copy: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    (gh_copy / "js" / "links.js").write_text('import fs from "./fs.js";\nexport function nextLink() {}\n')
    (gh_copy / "js" / "fs.js").write_text(
        f'await import("node:fs").then((fs) => fs.writeFileSync({json.dumps(str(marker))}, "x"));\nexport default 1;\n'
    )
    _build(gh_copy, tmp_path / "out", Ed25519PrivateKey.generate())
    assert not marker.exists()


def test_a_file_under_js_that_is_not_code_is_refused(gh_copy: Path, tmp_path: Path) -> None:
    (gh_copy / "js" / "run.sh").write_text("#!/bin/sh\n")
    with pytest.raises(
        ManifestError,
        match=r"^js/run.sh is not accepted under js/: the pack's code is .js and .mjs modules and .json data$",
    ):
        _build(gh_copy, tmp_path / "out", Ed25519PrivateKey.generate())


def test_publish_refuses_a_js_entry_missing_from_the_bundle() -> None:
    assert [v.message for v in missing_entries(GH, {"js/links.js"})] == [
        f'check 35: actions[{JS}].impl.entry "js/issues.js" is not a file of the pack\'s js/'
    ]
