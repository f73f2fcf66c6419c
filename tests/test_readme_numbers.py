"""Every measured number README.md and docs/*.md show comes from a committed results file, by one
script; and every relative link of those documents leads somewhere."""
import json
import re
import subprocess
import sys

import pytest
from conftest import REPO

RESULTS = sorted((REPO / "recipes" / "results").glob("*.json")) + sorted((REPO / "benchmarks" / "results").glob("*.json"))


def test_readme_tables_are_the_ones_the_results_files_make():
    """The marked tables of README.md and docs/*.md equal what scripts/readme_tables.py makes from the files now."""
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "readme_tables.py"), "--check"],
                          capture_output=True, text=True)  # the documented command
    assert proc.returncode == 0, proc.stderr


def test_the_check_covers_readme_and_every_docs_page():
    from lab import readme_tables

    assert readme_tables.documents() == [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    assert len(readme_tables.documents()) > 1


def test_every_table_is_shown_in_some_document():
    """No generated table is lost when text moves between README and docs/."""
    from lab import readme_tables

    text = "".join(path.read_text(encoding="utf-8") for path in readme_tables.documents())
    for name in readme_tables.TABLES:
        assert f"<!-- table:{name} -->" in text, name


def test_a_changed_results_file_makes_a_document_stale(tmp_path, monkeypatch):
    """The check is real: a number changed in a results file no longer matches the document that shows it."""
    from lab import readme_tables

    texts = {path: path.read_text(encoding="utf-8") for path in readme_tables.documents()}
    assert all(readme_tables.render(text) == text for text in texts.values())
    bench = tmp_path / "benchmarks" / "results"  # the same folder names, so the tables cite the same files
    bench.mkdir(parents=True)
    for path in (REPO / "benchmarks" / "results").glob("*.json"):
        data = json.loads(path.read_text())
        if path.name == "h100_train_bf16.json":
            data["results"]["base"]["ratio_tokens_per_s"] += 0.1
        (bench / path.name).write_text(json.dumps(data))
    monkeypatch.setattr(readme_tables, "BENCH", bench)
    assert [path for path, text in texts.items() if readme_tables.render(text) != text] == [
        REPO / "docs" / "benchmarks.md"]
    assert set(readme_tables.stale()) == {REPO / "docs" / "benchmarks.md"}


def test_a_stale_document_fails_the_check_naming_it(tmp_path, monkeypatch):
    from lab import readme_tables
    from attn_kit.cli import UserError

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "x.md").write_text("<!-- table:faults -->\nold\n<!-- /table:faults -->\n", encoding="utf-8")
    (tmp_path / "README.md").write_text(readme_tables.README.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setattr(readme_tables, "REPO", tmp_path)
    monkeypatch.setattr(readme_tables, "README", tmp_path / "README.md")
    monkeypatch.setattr(readme_tables, "DOCS", docs)
    with pytest.raises(UserError, match="docs/x.md"):
        readme_tables.main(["--check"])
    assert readme_tables.main([]) == 0
    assert readme_tables.faults() in (docs / "x.md").read_text(encoding="utf-8")
    assert readme_tables.main(["--check"]) == 0


# ------------------------------------------------------------------------------------------------ links
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def anchors(text: str) -> set:
    """The #anchors GitHub gives a markdown file's headings (code blocks left out)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    out = set()
    for heading in re.findall(r"^#+ (.+)$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


def relative_links():
    documents = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    for doc in documents:
        text = re.sub(r"^```.*?^```", "", doc.read_text(encoding="utf-8"), flags=re.S | re.M)
        for target in LINK.findall(text):
            if not re.match(r"[a-z]+:", target):  # http:, https:, mailto: are not checked here
                yield doc, target


def test_every_relative_link_names_a_file_and_heading_that_exist():
    links = list(relative_links())
    assert len(links) > 20  # README links every docs page, and the pages link each other
    for doc, target in links:
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        assert file.exists(), f"{doc.relative_to(REPO)} links to {target}, which does not exist"
        if anchor:
            assert anchor in anchors(file.read_text(encoding="utf-8")), (
                f"{doc.relative_to(REPO)} links to {target}: no such heading in {file.name}")


def test_readme_links_every_docs_page():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for page in sorted((REPO / "docs").glob("*.md")):
        assert f"](docs/{page.name})" in readme, page.name


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.name)
def test_every_results_file_says_how_where_and_when(path):
    data = json.loads(path.read_text())
    for key in ("command", "commit", "machine", "date"):
        assert data.get(key), (path.name, key)


def test_a_results_file_names_the_cpu_model_clock_and_vector_units():
    """issue 38: "Intel(R) Xeon(R) Processor" alone could not be compared with a user's CPU; every
    results file now records /proc/cpuinfo's model, family/model/stepping, clock and vector units,
    read here against /proc/cpuinfo itself."""
    import pathlib

    from attn_kit.results import VECTOR_FLAGS, provenance

    info = provenance("x")["cpu"]
    text = pathlib.Path("/proc/cpuinfo").read_text(encoding="utf-8").split("\n\n")[0]
    fields = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())}
    assert info["model"] == fields["model name"] and info["mhz"] == float(fields["cpu MHz"])
    assert info["family_model_stepping"] == f"{fields['cpu family']}/{fields['model']}/{fields['stepping']}"
    assert info["vector_flags"] == [f for f in VECTOR_FLAGS if f in fields["flags"].split()]
