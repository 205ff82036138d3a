"""The Python snippets of the README and the docs that bring up a fabric run as written
(root); the others run in ``tests/unit/test_doc_snippets.py``."""

from __future__ import annotations

import pytest

from tests import doc_snippets

# one bring-up per distinct snippet: a page may repeat another's
ROOT_BLOCKS = list({s.code: s for s in reversed(doc_snippets.blocks("python"))
                    if doc_snippets.needs_root(s.code)}.values())[::-1]


@pytest.mark.parametrize("snippet", ROOT_BLOCKS, ids=[s.where for s in ROOT_BLOCKS])
def test_python_snippet_runs_on_a_fabric(snippet, tmp_path):
    failure = doc_snippets.run_python(snippet, tmp_path)
    assert failure is None, failure
