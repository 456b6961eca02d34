"""Every registered kind has its page in docs/kinds/, named in its first heading, and in nav."""

from __future__ import annotations

import pytest

from meshtui.kinds import registry
from tests.docs.manual import ROOT, manual

PAGES = {
    page: (ROOT / "docs" / page).read_text().splitlines()[0]
    for page in manual().nav_pages()
    if page.startswith("kinds/")
}


@pytest.mark.parametrize("kind", sorted(registry.KINDS))
def test_every_kind_has_its_page(kind: str) -> None:
    named = [page for page, heading in PAGES.items() if f'`kind = "{kind}"' in heading]
    assert len(named) == 1, f'no page in docs/kinds/ whose title says `kind = "{kind}"`'
    assert f"| `{kind}`" in (ROOT / "docs" / "kinds" / "index.md").read_text()
