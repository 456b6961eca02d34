"""``meshtui kind list`` and ``meshtui kind config KIND``: the registered kinds, and each one's
server configuration for the mesh, printed or written into a folder.

The configuration is the kind's ``Kind.server_config`` (the same function its lab server is
written with). Nothing printed or written holds a secret: a file that needs one holds a
placeholder and says how to make it. ``--out`` writes every file or none: it refuses a folder
that already holds one of them, never follows a link there, and writes each with its own mode.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

from meshtui.cli.context import EXIT_FAILED, EXIT_INPUT, EXIT_OK
from meshtui.contracts.server_config import ConfigFile, ServerConfig, ServerPlace, ServerRecipe
from meshtui.kinds import registry


def cmd_kind_list(args: argparse.Namespace) -> int:
    """Every registered kind: its name, title, usual port and what a login is."""
    rows = [
        {
            "kind": k.name,
            "title": k.title,
            "port": k.port,
            "login": k.login_word,
            "admin": k.admin_word,
            "config": k.server_config is not None,
        }
        for k in registry.KINDS.values()
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    for row in rows:
        more = "  (meshtui kind config " + str(row["kind"]) + ")" if row["config"] else ""
        print(
            f"{row['kind']:<10} {row['title']:<11} port {row['port']:<5} a login is {row['login']}{more}"
        )
    return EXIT_OK


def recipe_of(name: str) -> ServerRecipe:
    """The server recipe of the kind ``name`` (KeyError when it declares none)."""
    ref = registry.kind_of(name).server_config
    if ref is None:
        raise KeyError(name)
    recipe: ServerRecipe = ref.load()
    return recipe


def place_of(default: ServerPlace, args: argparse.Namespace) -> ServerPlace:
    """The kind's usual place with what the command line changed."""
    changed = {
        "address": args.address,
        "port": args.port,
        "cert": args.tls_cert,
        "key": args.tls_key,
        "ca": args.ca,
        "conf": args.conf,
        "data": args.data,
        "admin": args.admin,
        "admin_file": args.admin_file,
        "networks": tuple(args.network) if args.network else None,
    }
    return dataclasses.replace(default, **{k: v for k, v in changed.items() if v is not None})


def cmd_kind_config(args: argparse.Namespace) -> int:
    """Print (or with ``--out`` write) the kind's server configuration."""
    try:
        recipe = recipe_of(args.kind)
    except KeyError:
        print(f"meshtui: kind {args.kind} has no server configuration to print", file=sys.stderr)
        return EXIT_INPUT
    try:
        config = recipe.build(place_of(recipe.default, args))
    except ValueError as exc:
        print(f"meshtui: {exc}", file=sys.stderr)
        return EXIT_INPUT
    if args.json:
        print(json.dumps(as_json(config), indent=2))
        return EXIT_OK
    if args.out is None:
        print_config(args.kind, config)
        return EXIT_OK
    try:
        written = write_config(config, args.out)
    except FileExistsError as exc:
        print(
            f"meshtui: {exc}: nothing was written (remove it or choose another --out folder)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    except OSError as exc:
        print(f"meshtui: cannot write into {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILED
    for path, item in written:
        print(f"wrote {path} ({item.mode:04o}): {item.purpose}; it goes to {item.path}")
        if item.secret:
            print(f"  its secret: {item.secret}")
    _tail(config)
    return EXIT_OK


def as_json(config: ServerConfig) -> dict[str, object]:
    """The configuration as JSON (modes as octal text)."""
    return {
        "title": config.title,
        "files": [{**dataclasses.asdict(f), "mode": f"{f.mode:04o}"} for f in config.files],
        "steps": list(config.steps),
        "expires": list(config.expires),
    }


def print_config(kind: str, config: ServerConfig) -> None:
    """Each file under a heading with its one-line why, then the steps and what expires."""
    print(f"# {config.title}: the server's configuration for the mesh (meshtui kind config {kind})")
    for item in config.files:
        print()
        print(f"## {item.name} -> {item.path} (mode {item.mode:04o})")
        print(f"## {item.purpose}")
        if item.secret:
            print(f"## its secret: {item.secret}")
        print(item.text, end="" if item.text.endswith("\n") else "\n")
    _tail(config)


def _tail(config: ServerConfig) -> None:
    if config.steps:
        print()
        print("## run once, in order")
        for step in config.steps:
            print(step)
    if config.expires:
        print()
        print("## what expires")
        for line in config.expires:
            print(f"- {line}")


def write_config(config: ServerConfig, out: Path) -> list[tuple[Path, ConfigFile]]:
    """Every file into ``out`` with its own mode, or none: FileExistsError naming the first
    that is there already (a link included, never followed)."""
    try:
        os.mkdir(out, 0o700)
    except FileExistsError:
        pass
    folder = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    written: list[tuple[Path, ConfigFile]] = []
    try:
        for item in config.files:
            try:
                os.lstat(item.name, dir_fd=folder)
            except FileNotFoundError:
                continue
            raise FileExistsError(f"{out / item.name} already exists")
        for item in config.files:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(item.name, flags, 0o600, dir_fd=folder)
            with os.fdopen(fd, "wb") as file:
                os.fchmod(fd, item.mode)
                file.write(item.text.encode())
                file.flush()
                os.fsync(fd)
            written.append((out / item.name, item))
    finally:
        os.close(folder)
    return written
