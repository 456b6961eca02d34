"""The pure parts: display rows, the filter language, sorting, grouping, diffs, the histogram,
the keymap reader and the action registry."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from meshtui.model import PairStatus, State
from meshtui.tui import actions
from meshtui.tui.keymap import check_entry, load_keymap
from meshtui.tui.pairs import PairModel, Query, make_row, short_age
from meshtui.tui.widgets.age_histogram import bars, bucket_counts
from meshtui.tui.widgets.line_table import GroupHeader, clean
from tests.tui.builder import FIXED_NOW


def status(consumer: str, provider: str = "db1/postgres", **kw: object) -> PairStatus:
    base = PairStatus(
        pair=f"database:{consumer}->{provider}",
        provision="database",
        consumer=consumer,
        provider=provider,
        login=consumer.replace("/", "_"),
        generation=1,
        consumer_generation=1,
        provider_generation=1,
        withdrawn=False,
        state=State.WORKING,
        reason="logged in",
        probed_at="2026-05-04T11:00:00+00:00",
        rotated_at=None,
        consumer_file="/srv/f",
        created_at="2026-05-01T12:00:00+00:00",
    )
    return replace(base, **kw)  # type: ignore[arg-type]


ROWS = [
    status("app1/gitea"),
    status("app1/wiki", state=State.STALE, reason="consumer holds generation 1, expected 2"),
    status("app2/gitea", provider="db2/postgres", generation=3, state=State.UNKNOWN),
    status("app2/chat", provider="db2/postgres", withdrawn=True, state=State.REVOKED),
]


def model() -> PairModel:
    m = PairModel()
    m.apply(ROWS, FIXED_NOW)
    return m


def test_short_age_fits_six_cells() -> None:
    assert [short_age(s) for s in (5, 125, 7200, 3 * 86400, 800 * 86400)] == [
        "5s",
        "2m",
        "2h",
        "3d",
        "2y",
    ]
    assert short_age(None) == "-"


def test_row_cells_ages_and_tone() -> None:
    row = make_row(ROWS[0], FIXED_NOW)
    assert row.cells[:5] == ("working", "database", "app1/gitea", "db1/postgres", "app1_gitea")
    assert row.cells[8] == "3d" and row.cells[9] == "1h"
    assert row.tone == "good"
    assert make_row(ROWS[1], FIXED_NOW).tone == "warn"
    assert make_row(replace(ROWS[0], alarm=True), FIXED_NOW).cells[0] == "ALARM"


def test_filter_words_and_fields() -> None:
    m = model()
    assert [r.status.consumer for r in m.filtered(Query.parse("gitea"))] == [
        "app1/gitea",
        "app2/gitea",
    ]
    assert [r.status.consumer for r in m.filtered(Query.parse("state:stale"))] == ["app1/wiki"]
    assert len(m.filtered(Query.parse("node:db2"))) == 2
    assert len(m.filtered(Query.parse("node:app1 gitea"))) == 1
    assert len(m.filtered(Query.parse("provider:db2 gen:3"))) == 1
    assert m.filtered(Query.parse("GITEA nothing-like-this")) == []
    assert Query.parse("unknownfield:x").words == ("unknownfield:x",)


def test_sort_puts_attention_first_and_reverses() -> None:
    m = model()
    by_state = m.view(Query(), sort="state")
    assert by_state[0] == ROWS[1].pair  # stale first
    assert m.view(Query(), sort="generation", reverse=True)[0] == ROWS[2].pair


def test_group_by_provider_and_node_and_collapse() -> None:
    m = model()
    view = m.view(Query(), group="provider")
    headers = [e for e in view if isinstance(e, GroupHeader)]
    assert [h.name for h in headers] == ["db1/postgres", "db2/postgres"]
    assert headers[0].label.startswith("provider db1/postgres · 2 pairs")
    collapsed = m.view(Query(), group="provider", collapsed=frozenset({"db1/postgres"}))
    assert len(collapsed) == len(view) - 2
    by_node = m.view(Query(), group="node")
    assert [e.name for e in by_node if isinstance(e, GroupHeader)] == ["app1", "app2"]


def test_merge_reports_only_what_changed_and_keeps_unchanged_rows() -> None:
    m = model()
    kept = m.rows[ROWS[0].pair]
    again = m.apply(ROWS, FIXED_NOW)
    assert not again.any
    changed = [ROWS[0], replace(ROWS[1], state=State.WORKING, reason="logged in"), *ROWS[2:]]
    diff = m.apply(changed, FIXED_NOW)
    assert diff.changed == [ROWS[1].pair] and not diff.added and not diff.removed
    assert m.rows[ROWS[0].pair] is kept
    gone = m.apply(changed[:3] + [status("app3/new")], FIXED_NOW)
    assert gone.removed == [ROWS[3].pair] and gone.added == ["database:app3/new->db1/postgres"]


def test_live_leaves_out_withdrawn() -> None:
    assert model().live([r.pair for r in ROWS]) == [r.pair for r in ROWS[:3]]


def test_clean_makes_control_characters_visible() -> None:
    assert clean("a\x1b[31mb") == "a\\x1b[31mb"
    assert clean("x[b]y") == "x[b]y"


def test_histogram_buckets_and_bars() -> None:
    day = 86400.0
    assert bucket_counts([0, day * 2, day * 10, day * 40, day * 400, None]) == [1, 1, 1, 1, 1]
    lines = bars([4, 0, 2, 0, 1], height=2)
    assert len(lines) == 2 and lines[1].startswith("███ ")


def test_keymap_files_merge_and_report_problems(tmp_path: Path) -> None:
    user, state = tmp_path / "user.toml", tmp_path / "tui.toml"
    user.write_text('[keymap]\nrotate = "ctrl+r"\nhelp = "f1"\n')
    state.write_text('[keymap]\nrotate = "f2"\nnope = "x"\nprobe = ""\n')
    loaded = load_keymap([user, state, tmp_path / "missing.toml"])
    assert loaded.keymap == {"rotate": "f2", "help": "f1"}
    assert loaded.sources == [user, state]
    assert len(loaded.problems) == 2 and "nope" in loaded.problems[0]
    (tmp_path / "bad.toml").write_text("[keymap\n")
    assert "cannot read" in load_keymap([tmp_path / "bad.toml"]).problems[0]
    assert check_entry("rotate", "ctrl+r,f2") is None
    assert check_entry("rotate", "ctrl r") is not None


def test_registry_ids_are_unique_per_scope_and_every_mutating_action_is_marked() -> None:
    for scope in actions.SCOPES:
        ids = [a.id for a in actions.in_scope(scope)]
        assert len(ids) == len(set(ids)), scope
    assert {
        "rotate", "rotate_set", "drill", "probe", "probe_all", "push", "rotate_secrets",
    } == actions.MUTATING  # fmt: skip
    assert all(a.help and a.description for a in actions.ACTIONS)
    # nothing reachable only by a ctrl-chord
    for a in actions.ACTIONS:
        assert any(not k.startswith("ctrl+") for k in a.keys.split(",")), a.id


def test_a_query_narrows_one_whose_terms_it_contains() -> None:
    app = Query.parse("app")
    assert Query.parse("app1").narrows(app) and Query.parse("app stale").narrows(app)
    assert not app.narrows(Query.parse("app1"))
    assert Query.parse("app state:stale").narrows(Query.parse("state:stale"))
    assert not Query.parse("app").narrows(Query.parse("state:stale"))
    assert not Query.parse("node:app12").narrows(Query.parse("node:app1"))  # exact field
    assert Query.parse("gitea overdue").narrows(Query.parse("overdue"))
    assert not Query.parse("gitea").narrows(Query.parse("gitea overdue"))


def test_kept_filter_results_match_filtering_every_row_and_go_when_rows_change() -> None:
    m = model()
    typed = ["g", "gi", "gitea", "gitea app2", "gitea app", "gitea", "wiki", "", "app", "app2"]

    def plain(text: str) -> list[str]:
        match = Query.parse(text).matcher()
        return [k for k, r in m.rows.items() if match(r)]

    for text in typed + typed[::-1]:
        assert [r.key for r in m.filtered(Query.parse(text))] == plain(text), text
    kept = m.filtered(Query.parse("wiki"))
    kept.clear()  # the caller's copy: sorting or clearing it leaves the kept result alone
    assert len(m.filtered(Query.parse("wiki"))) == 1
    renamed = [replace(ROWS[0], reason="wiki moved here"), *ROWS[1:]]
    m.apply(renamed, FIXED_NOW)
    assert [r.key for r in m.filtered(Query.parse("wiki"))] == plain("wiki")
    assert len(plain("wiki")) == 2
