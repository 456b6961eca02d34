"""The one registry of everything an operator can do in the dashboard.

Bindings (with ids, so a keymap can move them), the footer, the ``?`` help screen and the
command palette are all built from :data:`ACTIONS`; an action missing here cannot be bound,
listed or found. ``mutating`` marks the actions that change things and ``contacts`` the ones
that ask the agents; a read-only dashboard hides and refuses both (its controller has no key).
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding, BindingType

SCOPES = {
    "app": "Everywhere",
    "pairs": "Pairs (main screen)",
    "pair": "One pair",
    "hosts": "Hosts",
    "audit": "Audit",
    "job": "Action progress",
    "dialog": "Dialogs",
}
"""Where a binding is active, in the order the help screen lists them."""


@dataclass(frozen=True)
class Act:
    """One bindable action: its id (the keymap's name for it), default keys and texts."""

    id: str
    keys: str
    action: str
    description: str
    help: str
    scopes: tuple[str, ...]
    mutating: bool = False
    contacts: bool = False
    show: bool = True
    priority: bool = False
    secrets: tuple[str, ...] = ()
    """On the main list, the origins of a module's own secret (``minted``, ``supplied``) whose
    row this action acts on; none: it acts on pairs only (a secret's row is refused)."""


ACTIONS: tuple[Act, ...] = (
    # everywhere
    Act(
        "help",
        "question_mark",
        "app.help",
        "Help",
        "Every key, and where to remap them",
        ("app", "pairs", "pair", "hosts", "audit", "job"),
    ),
    Act("quit", "q", "quit", "Quit", "Leave the dashboard", ("app",)),
    Act(
        "palette",
        "colon",
        "command_palette",
        "Commands",
        "Search every action by name (also ctrl+p)",
        ("app",),
    ),
    Act("pairs", "m", "pairs", "Pairs", "The main table of every pair", ("app",), show=False),
    Act("hosts", "h", "hosts", "Hosts", "Every node: reachable, key, who is behind", ("app",)),
    Act("audit", "a", "audit", "Audit", "The hash-chained audit log", ("app",)),
    Act(
        "outcome",
        "o",
        "outcome",
        "Last action",
        "Show the progress and outcome of the last action again",
        ("app",),
        show=False,
    ),
    # shared by several screens
    Act("back", "escape", "back", "Back", "Close this screen", ("pair", "hosts", "audit", "job")),
    Act(
        "refresh",
        "f5,ctrl+l",
        "refresh",
        "Refresh",
        "Read the inventory again now (it also reloads when the file changes)",
        ("pairs", "pair", "hosts", "audit"),
        show=False,
    ),
    Act(
        "filter",
        "slash",
        "filter",
        "Filter",
        "Filter as you type (state:stale node:app1 provider:db1 words…)",
        ("pairs", "audit"),
    ),
    Act(
        "open",
        "enter",
        "open",
        "Open",
        "Open what the cursor is on (a module's own secret: its vault pair)",
        ("pairs", "hosts", "audit"),
        secrets=("minted", "supplied"),
    ),
    # pairs
    Act(
        "mark",
        "space",
        "mark",
        "Mark",
        "Mark or unmark the pair (marked pairs act together)",
        ("pairs",),
        secrets=("minted", "supplied"),
    ),
    Act(
        "mark-shown",
        "asterisk",
        "mark_shown",
        "Mark shown",
        "Mark every pair shown (again: unmark them)",
        ("pairs",),
        show=False,
    ),
    Act(
        "clear",
        "escape",
        "clear",
        "Clear",
        "Clear the filter, then the marks",
        ("pairs",),
        show=False,
    ),
    Act("sort", "s", "sort", "Sort", "Sort by the next column (or click a header)", ("pairs",)),
    Act(
        "sort-reverse",
        "S",
        "sort_reverse",
        "Reverse",
        "Reverse the sort order",
        ("pairs",),
        show=False,
    ),
    Act(
        "group",
        "g",
        "group",
        "Group",
        "Group by provider, by consumer node, or not at all",
        ("pairs",),
    ),
    Act(
        "rotate",
        "r",
        "rotate",
        "Rotate",
        "Rotate the pair (or the minted own secret) under the cursor (plan first, then confirm)",
        ("pairs", "pair"),
        mutating=True,
        secrets=("minted",),
    ),
    Act(
        "rotate-set",
        "R",
        "rotate_set",
        "Rotate set",
        "Rotate the marked pairs, else the filtered ones, else the group or provider",
        ("pairs",),
        mutating=True,
    ),
    Act(
        "drill",
        "d",
        "drill",
        "Drill",
        "Rotate and prove it with three logins (old before, new after, old after)",
        ("pairs", "pair"),
        mutating=True,
        secrets=("minted",),
    ),
    Act(
        "rotate-secrets",
        "t",
        "rotate_secrets",
        "Rotate secrets",
        "Rotate the minted own secrets of a vault pair's module (confirm first)",
        ("pair",),
        mutating=True,
    ),
    Act(
        "probe",
        "p",
        "probe",
        "Probe",
        "Log in from the consumer's node with the credential it holds",
        ("pairs", "pair"),
        mutating=True,
    ),
    Act(
        "probe-all",
        "P",
        "probe_all",
        "Probe all",
        "Probe every live pair",
        ("pairs",),
        mutating=True,
    ),
    Act(
        "push",
        "u",
        "push",
        "Push",
        "Bring every end to the generation it must hold",
        ("pairs",),
        mutating=True,
        show=False,
    ),
    Act(
        "copy-login",
        "c",
        "copy_login",
        "Copy login",
        "Copy the pair's login to the clipboard (OSC 52); never a secret",
        ("pairs", "pair"),
        show=False,
    ),
    Act(
        "copy-pair",
        "y",
        "copy_pair",
        "Copy id",
        "Copy the pair id to the clipboard (OSC 52)",
        ("pairs", "pair"),
        show=False,
        secrets=("minted", "supplied"),
    ),
    # hosts
    Act(
        "check",
        "k",
        "check",
        "Check agents",
        "Ask every node's agent (reads only)",
        ("hosts",),
        contacts=True,
    ),
    Act(
        "doctor",
        "d",
        "doctor",
        "Doctor",
        "Preflight every node: key, folders, users, reloads, admin files, ports, clocks",
        ("hosts",),
        contacts=True,
    ),
    Act(
        "copy-fingerprint",
        "c",
        "copy_fingerprint",
        "Copy key",
        "Copy the node's key fingerprint (OSC 52)",
        ("hosts",),
        show=False,
    ),
    # audit
    Act("verify", "v", "verify", "Verify", "Check the hash chain again", ("audit",)),
    Act(
        "export-json",
        "e",
        "export('json')",
        "Export JSON",
        "Write every event to a JSON file",
        ("audit",),
    ),
    Act(
        "export-csv",
        "x",
        "export('csv')",
        "Export CSV",
        "Write every event to a CSV file",
        ("audit",),
    ),
    # dialogs
    Act("cancel", "escape", "cancel", "Cancel", "Close without doing anything", ("dialog",)),
)

MUTATING: frozenset[str] = frozenset(a.action for a in ACTIONS if a.mutating)
"""Action names that change the inventory or a node."""

READ_ONLY_OFF: frozenset[str] = frozenset(a.action for a in ACTIONS if a.mutating or a.contacts)
"""Action names a read-only dashboard hides from keys, footer, help and palette, and refuses:
the mutating ones and the ones that send anything to an agent."""

IDS: frozenset[str] = frozenset(a.id for a in ACTIONS)
"""Every binding id a keymap may name."""


def acts_on_secret(action: str, origin: str) -> bool:
    """Whether the action ``action`` (its id) acts on the row of a module's own secret of
    ``origin`` (minted or supplied): the registry decides, never the screen."""
    return any(a.id == action and origin in a.secrets for a in ACTIONS)


def bindings(scope: str) -> list[BindingType]:
    """The Textual bindings of one scope, each with its id and a tooltip."""
    return [
        Binding(
            a.keys,
            a.action,
            a.description,
            show=a.show,
            priority=a.priority,
            tooltip=a.help,
            id=a.id,
        )
        for a in ACTIONS
        if scope in a.scopes
    ]


def in_scope(scope: str) -> list[Act]:
    """The actions of one scope, in registry order."""
    return [a for a in ACTIONS if scope in a.scopes]


KEY_NAMES = {
    "question_mark": "?",
    "slash": "/",
    "colon": ":",
    "asterisk": "*",
    "space": "space",
    "full_stop": ".",
}


def show_keys(keys: str) -> str:
    """``question_mark,f1`` as ``? / f1`` for people."""
    return " / ".join(KEY_NAMES.get(k.strip(), k.strip()) for k in keys.split(","))
