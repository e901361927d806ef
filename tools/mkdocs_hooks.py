"""mkdocs hooks: the site's home page is the README and its changelog page CHANGELOG.md,
read at build time, so that neither is kept twice."""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
_FROM_ROOT = {"index.md": "README.md", "changelog.md": "CHANGELOG.md"}


def on_page_markdown(markdown, page, **kwargs):
    source = _FROM_ROOT.get(page.file.src_uri)
    if source is None:
        return markdown
    text = (ROOT / source).read_text()
    return text.replace("](docs/", "](").replace("](CHANGELOG.md)", "](changelog.md)")
