"""The command palette's provider: every registered action, plus commands about providers and
nodes (rotate a provider's pairs, filter to a node, group, sort).

A command runs through ``run_action``, so ``check_action`` decides again when it runs; in a
read-only dashboard the commands that change things or ask an agent are not even offered (and
the controller refuses them if they were).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.content import Content
from textual.markup import escape

from meshtui.tui import actions
from meshtui.tui.pairs import COLUMNS, GROUPINGS

if TYPE_CHECKING:
    from meshtui.tui.dashboard import Dashboard


@dataclass(frozen=True)
class Command:
    """One palette entry."""

    title: str
    help: str
    run: Callable[[], Awaitable[Any] | None]
    discover: bool = True


class MeshCommands(Provider):
    """meshtui's commands for the screen the palette was opened on."""

    @property
    def mesh(self) -> Dashboard:
        """The app, typed."""
        return cast("Dashboard", self.app)

    def commands(self) -> Iterator[Command]:
        """Every command that may run right now."""
        mesh = self.mesh
        screen = self.screen
        scope = getattr(screen, "SCOPE", None)
        for act in actions.ACTIONS:
            if act.id in ("cancel", "palette") or not mesh.allows(act.action):
                continue
            keys = actions.show_keys(mesh.keymap.get(act.id, act.keys))
            if "app" in act.scopes:
                yield Command(
                    act.description,
                    f"{act.help} (key {keys})",
                    partial(mesh.run_action, act.action),
                )
            elif scope in act.scopes:
                yield Command(
                    act.description,
                    f"{act.help} (key {keys})",
                    partial(screen.run_action, act.action),
                )
        from meshtui.tui.screens.main import MainScreen

        if not isinstance(screen, MainScreen):
            return
        providers = sorted({r.status.provider for r in mesh.model.rows.values()})
        nodes = sorted(
            {r.status.consumer_node for r in mesh.model.rows.values()}
            | {r.status.provider_node for r in mesh.model.rows.values()}
        )
        for provider in providers:
            if mesh.allows("rotate_set"):
                yield Command(
                    f"Rotate provider {provider}",
                    f"Plan a rotation of every live pair whose provider is {provider}",
                    partial(screen.rotate_provider, provider),
                    discover=False,
                )
            yield Command(
                f"Filter provider {provider}",
                f"Show only the pairs of {provider}",
                partial(screen.set_filter, f"provider:{provider}"),
                discover=False,
            )
        for node in nodes:
            yield Command(
                f"Filter node {node}",
                f"Show only the pairs with an end on {node}",
                partial(screen.set_filter, f"node:{node}"),
                discover=False,
            )
        for group in GROUPINGS:
            yield Command(
                f"Group by {group}",
                "Group the pairs table",
                partial(screen.set_group, group),
                discover=False,
            )
        for column in COLUMNS:
            yield Command(
                f"Sort by {column.label}",
                f"Sort the pairs table by {column.key}",
                partial(screen.set_sort, column.key),
                discover=False,
            )

    async def discover(self) -> Hits:
        for command in self.commands():
            if command.discover:
                yield DiscoveryHit(Content(command.title), command.run, help=escape(command.help))

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for command in self.commands():
            score = matcher.match(command.title)
            if score > 0:
                yield Hit(
                    score, matcher.highlight(command.title), command.run, help=escape(command.help)
                )
