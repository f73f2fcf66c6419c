"""attn_kit's import graph (every import, function-level ones included) has no cycles, and
its stage engine (attn_kit.pipeline) knows nothing of fairseq."""
from attn_kit.checkout import REPO
from attn_kit.code_stats import cycles, import_graph


def test_the_graph_sees_function_level_and_relative_imports():
    graph = import_graph(REPO)
    assert "attn_kit.pipeline.stages" in graph["attn_kit.recipes.wmt14"]
    assert "attn_kit.cli" in graph["attn_kit.pipeline.text"]
    assert "attn_kit.pipeline.stages" in graph["attn_kit.recipes.scale"]  # imported inside a function
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_attn_kit_has_no_import_cycles():
    assert cycles(import_graph(REPO)) == []


def test_the_stage_engine_knows_nothing_of_fairseq():
    """attn_kit.pipeline imports neither fairseq nor the kit's fairseq layer."""
    for name, targets in import_graph(REPO).items():
        if name.startswith("attn_kit.pipeline"):
            assert not {t for t in targets if t.startswith(("attn_kit.fairseq", "attn_kit.curves"))}, name
            path = REPO / (name.replace(".", "/") + ("/__init__.py" if name.endswith("pipeline") else ".py"))
            source = path.read_text(encoding="utf-8")
            assert "import fairseq" not in source and "from fairseq" not in source, name
