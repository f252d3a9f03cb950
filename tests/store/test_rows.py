import json

import pytest

from rifflux.store.rows import headings_from_json, headings_json


@pytest.mark.parametrize(
    "headings",
    [
        [],
        [(0, "Guide")],
        [(0, "Guide"), (17, "Guide > Install")],
        [(3, 'Quotes " and \\\\ back\\\\slashes'), (40, "Tabs\\tnew\\nlines\\x00\\x1f")],
        [(1, "Ünïcödé 東京 🚀 \\u2028 \\ud800")],
    ],
)
def test_headings_json_is_the_text_json_dumps_gives(headings):
    pairs = [[offset, path] for offset, path in headings]
    assert headings_json(headings) == json.dumps(pairs, ensure_ascii=False, separators=(",", ":"))
    assert headings_from_json(headings_json(headings)) == [
        {"offset": offset, "heading_path": path} for offset, path in headings
    ]
