"""holdings.json is read by its typed shape: a corrupted record stops the agent, naming the file,
the field and what to do, instead of a node that silently forgets what it holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from meshtui.errors import HostFileError
from meshtui.host.state.holdings import FILE, Holdings
from meshtui.model import End

GITEA = "database:app1/gitea->db1/postgres"


def record(folder: Path, text: str) -> None:
    (folder / FILE).write_text(text)
    (folder / FILE).chmod(0o600)


def test_a_kept_record_is_read_back_typed(tmp_path: Path) -> None:
    Holdings(tmp_path).update(End.CONSUMER, {GITEA: {"generation": 3, "digest": "d" * 64}})
    again = Holdings(tmp_path)
    assert again.get(End.CONSUMER, GITEA) == {"generation": 3, "digest": "d" * 64}
    (held,) = again.listing()
    assert held["end"] is End.CONSUMER and held["pair"] == GITEA


def test_no_record_is_an_empty_one(tmp_path: Path) -> None:
    assert Holdings(tmp_path).listing() == []


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (
            json.dumps({"consumer": {GITEA: {"generation": "3", "digest": "d"}}}),
            f"consumer {GITEA}: Expected `int`, got `str` - at `$.generation`",
        ),
        (
            json.dumps({"consumer": {GITEA: {"digest": "d"}}}),
            "Object missing required field `generation`",
        ),
        (json.dumps({"both": {}}), "Object contains unknown field `both`"),
        (json.dumps([]), "Expected `object`, got `array`"),
        ('{"consumer": {"' + GITEA + '": {"generation": 3,', "is not JSON"),
    ],
)
def test_a_corrupted_record_is_refused_naming_file_field_and_fix(
    tmp_path: Path, text: str, named: str
) -> None:
    record(tmp_path, text)
    with pytest.raises(HostFileError) as caught:
        Holdings(tmp_path)
    message = str(caught.value)
    assert message.startswith(str(tmp_path / FILE))
    assert named in message
    assert "move it aside" in message and "meshtui push" in message
    assert (tmp_path / FILE).read_text() == text  # nothing is lost: the file is left as it was


def test_the_agent_does_not_start_on_a_corrupted_record(mesh_with_agents) -> None:
    """The real ``meshtui host serve``: it refuses to run, and says why and what to do."""
    mesh = mesh_with_agents(
        consumers={"app1": ["gitea"]}, port=5432, admin=None, provisioner=["true"]
    )
    assert mesh.cli("push").returncode == 0
    path = mesh.nodes["app1"] / FILE
    held = json.loads(path.read_text())
    held["consumer"][GITEA]["generation"] = "1"
    record(mesh.nodes["app1"], json.dumps(held))
    with pytest.raises(RuntimeError) as caught:
        mesh.start("app1")
    assert f"{path} is not a holdings record" in str(caught.value)
    assert f"consumer {GITEA}: Expected `int`, got `str` - at `$.generation`" in str(caught.value)
