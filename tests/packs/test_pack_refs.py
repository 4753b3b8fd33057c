"""Action refs: a major pin, an exact pin, and a clear sentence for everything else."""

from __future__ import annotations

import pytest

from packs.errors import RefError
from packs.refs import ActionRef


def test_a_major_ref() -> None:
    ref = ActionRef.parse("com.example.tools/echo/echo@1")
    assert (ref.namespace, ref.name, ref.action, ref.version) == ("com.example.tools", "echo", "echo", "1")
    assert ref.pack == "com.example.tools/echo"
    assert not ref.is_exact
    assert ref.major == 1
    assert str(ref) == "com.example.tools/echo/echo@1"


def test_an_exact_ref() -> None:
    ref = ActionRef.parse("io.b3os/open-meteo/search-places@1.0.0")
    assert ref.is_exact and ref.version == "1.0.0" and ref.major == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "com.example.tools/echo/echo",
            "action ref 'com.example.tools/echo/echo' has no version: add @<major>",
        ),
        ("com.example.tools/echo@1", "action ref 'com.example.tools/echo@1' is not accepted: use"),
        ("example/echo/echo@1", "action ref 'example/echo/echo@1': namespace 'example' is not accepted"),
        ("com.example/Echo/echo@1", "action ref 'com.example/Echo/echo@1': pack name 'Echo' is not accepted"),
        (
            "com.example/echo/do_it@1",
            "action ref 'com.example/echo/do_it@1': action key 'do_it' is not accepted",
        ),
        (
            "com.example/echo/echo@1.0",
            "action ref 'com.example/echo/echo@1.0': version '1.0' is not accepted",
        ),
        ("com.example/echo/echo@01", "action ref 'com.example/echo/echo@01': version '01' is not accepted"),
        ("com.example/echo/echo@latest", "version 'latest' is not accepted"),
        ("", "action ref '' is not accepted"),
    ],
)
def test_a_bad_ref_is_refused_with_a_sentence(text: str, message: str) -> None:
    with pytest.raises(RefError) as err:
        ActionRef.parse(text)
    assert message in str(err.value)
