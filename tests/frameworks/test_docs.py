"""Each page in docs/frameworks/ shows a runnable app: run it under uvicorn and check it limits."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from tests.frameworks._servers import ROOT, serve

DOCS = ROOT / "docs" / "frameworks"
PAGES = ("starlette", "fastapi", "litestar", "quart", "falcon", "django")


def first_python_block(page: Path) -> str:
    match = re.search(r"```python\n(.*?)```", page.read_text(), re.DOTALL)
    assert match, f"{page} has no python block"
    return match.group(1)


@pytest.mark.parametrize("name", PAGES)
def test_the_page_snippet_runs_and_limits(name: str, tmp_path: Path) -> None:
    (tmp_path / f"docs_{name}.py").write_text(first_python_block(DOCS / f"{name}.md"))
    with (
        serve("uvicorn-asyncio", f"docs_{name}:app", path=tmp_path) as url,
        httpx.Client(base_url=url, timeout=5) as http,
    ):
        responses = [http.get("/limited") for _ in range(4)]
        files = [http.get("/files/x").status_code for _ in range(3)]
    assert [r.status_code for r in responses] == [200, 200, 200, 429]
    assert [r.headers["x-ratelimit-remaining"] for r in responses] == ["2", "1", "0", "0"]
    assert responses[0].headers["set-cookie"] == f"framework={name}; Path=/"
    assert files == [200, 200, 429]


def test_the_index_lists_every_page() -> None:
    index = (DOCS / "index.md").read_text()
    for name in PAGES:
        assert f"]({name}.md)" in index
