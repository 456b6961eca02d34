"""Login derivation: unique, <= 63 bytes, stable, a valid identifier, independent of the rest."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshtui.controller.plan.naming import MAX_LOGIN_BYTES, derive_login, is_safe_login
from meshtui.model import NAME_RE

IDENT = re.compile(r"[a-z_][a-z0-9_]*")
names = st.from_regex(NAME_RE, fullmatch=True)
long_names = st.from_regex(r"[a-z0-9][a-z0-9_-]{24,31}", fullmatch=True)
any_name = st.one_of(names, long_names)
pairs = st.tuples(any_name, any_name)


def _twin(name: str) -> st.SearchStrategy[str]:
    """Names that fold to the same text as ``name``: each '-' or '_' may become the other."""
    seps = [i for i, c in enumerate(name) if c in "-_"]

    def flip(mask: list[bool]) -> str:
        chars = list(name)
        for i, f in zip(seps, mask, strict=True):
            if f:
                chars[i] = "_" if chars[i] == "-" else "-"
        return "".join(chars)

    return st.lists(st.booleans(), min_size=len(seps), max_size=len(seps)).map(flip)


@given(pairs)
def test_login_is_a_lower_case_identifier_of_at_most_63_bytes(pair: tuple[str, str]) -> None:
    login = derive_login(*pair)
    assert IDENT.fullmatch(login), login
    assert login == login.lower()
    assert len(login.encode()) <= MAX_LOGIN_BYTES
    assert is_safe_login(login)


@given(pairs)
def test_login_is_stable(pair: tuple[str, str]) -> None:
    assert derive_login(*pair) == derive_login(*pair)


@settings(max_examples=50)
@given(st.lists(pairs, min_size=2, max_size=200, unique=True))
def test_logins_are_unique_across_many_consumers(consumers: list[tuple[str, str]]) -> None:
    logins = [derive_login(node, module) for node, module in consumers]
    assert len(set(logins)) == len(consumers)


@given(st.data())
def test_names_that_fold_alike_still_get_different_logins(data: st.DataObject) -> None:
    node = data.draw(names)
    module = data.draw(st.from_regex(r"[a-z][a-z0-9]{0,5}([-_][a-z0-9]{1,5}){1,4}", fullmatch=True))
    other = data.draw(_twin(module).filter(lambda m: m != module))
    assert derive_login(node, module) != derive_login(node, other)
    node_twin = data.draw(_twin(node))
    if node_twin != node:
        assert derive_login(node, module) != derive_login(node_twin, module)


@settings(max_examples=50)
@given(pairs, st.lists(pairs, max_size=20))
def test_a_login_depends_only_on_its_own_node_and_module(
    pair: tuple[str, str], others: list[tuple[str, str]]
) -> None:
    alone = derive_login(*pair)
    for o in others:
        derive_login(*o)
    assert derive_login(*pair) == alone


@pytest.mark.parametrize(
    ("node", "module"),
    [("app1", "my-app"), ("app1", "my_app"), ("app-1", "x"), ("app_1", "x")],
)
def test_logins_read_module_then_node(node: str, module: str) -> None:
    login = derive_login(node, module)
    assert login.startswith(module.replace("-", "_") + "_" + node.replace("-", "_") + "_")


def test_my_app_and_my_app_differ() -> None:
    assert derive_login("app1", "my-app") != derive_login("app1", "my_app")
    assert derive_login("app-1", "x") != derive_login("app_1", "x")


def test_longest_names_are_shortened_not_truncated_blindly() -> None:
    node, module = "n" * 32, "m" * 32
    login = derive_login(node, module)
    assert len(login) <= MAX_LOGIN_BYTES
    assert login != derive_login(node, "m" * 31 + "x")
    assert login.startswith("m") and "_n" in login


def test_a_module_starting_with_a_digit_still_gives_an_identifier() -> None:
    assert IDENT.fullmatch(derive_login("app1", "9lives"))


@pytest.mark.parametrize("bad", ["Gitea", "1abc", "a" * 64, "a-b", "a;drop", "é", ""])
def test_is_safe_login_refuses_what_the_mesh_would_not_derive(bad: str) -> None:
    assert not is_safe_login(bad)


@pytest.mark.parametrize(
    ("node", "module"),
    [("app1", "gitea"), ("n" * 40, "m" * 40), ("app1", "wiki-ÄÖ" * 9)],
)
def test_an_alternating_pairs_two_logins_are_distinct_valid_and_kept_under_63_bytes(
    node: str, module: str
) -> None:
    """Both alternates of a derived login fit PostgreSQL's 63 bytes, differ from each other and
    from the owner, and two owners never share one."""
    from meshtui.contracts.adapter import alternate_login

    owner = derive_login(node, module)
    a, b = alternate_login(owner, "a"), alternate_login(owner, "b")
    assert len({owner, a, b}) == 3
    for login in (a, b):
        assert is_safe_login(login), login
    other = derive_login(node, module + "x")
    assert alternate_login(other, "a") != a
    assert alternate_login(owner[:-1] + "0", "a") != a


def test_an_owner_of_63_bytes_still_has_two_alternates() -> None:
    from meshtui.contracts.adapter import alternate_login

    owner = "m" * 63
    a, b = alternate_login(owner, "a"), alternate_login(owner, "b")
    assert a != b and len(a) <= 63 and len(b) <= 63
    assert alternate_login("m" * 62 + "n", "a") != a


def test_an_alternate_other_than_a_or_b_is_refused() -> None:
    from meshtui.contracts.adapter import alternate_login
    from meshtui.errors import UnsafeLoginError

    with pytest.raises(UnsafeLoginError, match="names no alternate"):
        alternate_login("gitea_app1_12ab34", "c")
