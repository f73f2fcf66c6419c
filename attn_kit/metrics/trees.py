"""Penn Treebank trees for the parsing recipe (Sec. 6.3): reading (one error naming file and
line for a malformed tree), the preprocessing every WSJ parser uses (:func:`strip_tree`), and
Vinyals et al. (2015)'s linearization (:func:`linearize`) with its inverse (:func:`delinearize`),
which repairs what the model got wrong and counts each repair (:data:`REPAIRS`):

    (TOP (S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .)))
    -> (S (NP XX )NP (VP XX (NP XX XX )NP )VP XX )S          (pos_tags="xx")
    -> (S (NP NNP )NP (VP VBZ (NP DT NN )NP )VP . )S         (pos_tags="keep")
"""
import re
from collections import Counter
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Tuple, Union

from attn_kit.textio import iter_lines


class TreeError(ValueError):
    """A malformed tree; the message names the file and line."""


class Tree:
    """A constituent: ``label`` and ``children`` (Trees), or a preterminal whose only child is its word (a str)."""

    __slots__ = ("label", "children")

    def __init__(self, label: str, children: List[Union["Tree", str]]):
        self.label = label
        self.children = children

    @property
    def is_preterminal(self) -> bool:
        return len(self.children) == 1 and isinstance(self.children[0], str)

    def preterminals(self) -> Iterator["Tree"]:
        if self.is_preterminal:
            yield self
        else:
            for child in self.children:
                yield from child.preterminals()

    def words(self) -> List[str]:
        return [p.children[0] for p in self.preterminals()]

    def tags(self) -> List[str]:
        return [p.label for p in self.preterminals()]

    def __str__(self) -> str:
        if self.is_preterminal:
            return f"({self.label} {self.children[0]})"
        return f"({self.label} {' '.join(str(c) for c in self.children)})"

    def __repr__(self) -> str:
        return f"Tree({str(self)!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Tree) and str(self) == str(other)

    def __hash__(self):
        return hash(str(self))


# --------------------------------------------------------------------------- reading
_TOKEN = re.compile(r"\n|[()]|[^\s()]+")  # a line's end, a bracket or an atom (\s: str.isspace's characters)


def _tokens(text: str, first_line: int = 1) -> Iterator[Tuple[str, int]]:
    """'(' , ')' and atoms, each with its line number."""
    line = first_line
    for match in _TOKEN.finditer(text):
        if match.group() == "\n":
            line += 1
        else:
            yield match.group(), line


def parse_trees(text: str, source: str = "<string>", first_line: int = 1) -> Iterator[Tuple[Tree, int]]:
    """Every tree in ``text`` with the line it starts on. Accepts the treebank's
    ``( (S ...) )`` wrapper (an empty root label) and plain ``(S ...)``."""
    stack: List[Tuple[Tree, int]] = []
    expect_label = False
    for tok, line in _tokens(text, first_line):
        if tok == "(":
            node = Tree("", [])
            if stack:
                parent = stack[-1][0]
                if parent.is_preterminal:
                    raise TreeError(f"{source}:{line}: a bracket inside ({parent.label} {parent.children[0]} ...); "
                                    "a word's (TAG word) pair holds one word")
                parent.children.append(node)
            stack.append((node, line))
            expect_label = True
        elif tok == ")":
            if not stack:
                raise TreeError(f"{source}:{line}: ')' with no open bracket")
            node, start = stack.pop()
            if not node.children:
                raise TreeError(f"{source}:{line}: empty bracket ({node.label}) (opened on line {start})")
            expect_label = False
            if not stack:
                yield node, start
        else:
            if not stack:
                raise TreeError(f"{source}:{line}: text outside a tree: {tok!r}")
            node = stack[-1][0]
            if expect_label:
                node.label = tok
                expect_label = False
            elif not node.children:
                node.children.append(tok)
            elif node.is_preterminal:
                raise TreeError(f"{source}:{line}: more than one word in ({node.label} {node.children[0]} {tok} ...)")
            else:
                raise TreeError(f"{source}:{line}: word {tok!r} outside a (TAG word) pair in ({node.label} ...)")
    if stack:
        node, start = stack[0]
        raise TreeError(f"{source}:{start}: the tree that starts here is never closed "
                        f"({len(stack)} ')' missing at the end of the file)")


def _open(path: Path):
    try:
        return open(path, "rb")
    except OSError as exc:
        raise TreeError(f"{path}: cannot read it ({exc.strerror})") from None


def read_mrg(path: Path) -> List[Tree]:
    """All trees of a treebank ``.mrg`` file (trees over several lines)."""
    path = Path(path)
    with _open(path) as f:
        text = "".join(line + "\n" for line in iter_lines(f, str(path)))
    return [tree for tree, _ in parse_trees(text, str(path))]


def read_tree_lines(path: Path) -> Iterator[Tree]:
    """Trees one per line (blank lines skipped), e.g. silver trees for --extra-trees."""
    path = Path(path)
    with _open(path) as f:
        for n, line in enumerate(iter_lines(f, str(path)), 1):
            if not line.strip():
                continue
            trees = list(parse_trees(line, str(path), n))
            if len(trees) != 1:
                raise TreeError(f"{path}:{n}: {len(trees)} trees on one line; expected one bracketed tree per line")
            yield trees[0][0]


# --------------------------------------------------------------------------- preprocessing
def bare_label(label: str) -> str:
    """A constituent label without function tags or indices: NP-SBJ-1 -> NP, NP=2 -> NP (-NONE- stays)."""
    return label if label.startswith("-") else re.split("[-=]", label, maxsplit=1)[0]


def _strip(node: Tree) -> Optional[Tree]:
    if node.is_preterminal:
        return None if node.label == "-NONE-" else Tree(node.label, [node.children[0]])
    children = [c for c in (_strip(child) for child in node.children) if c is not None]
    return Tree(bare_label(node.label), children) if children else None


def strip_tree(tree: Tree) -> Optional[Tree]:
    """The tree as parsers see it: no empty elements, no function tags, a TOP root.
    None when nothing but empty elements is left."""
    wrapper = tree.label in ("", "TOP", "ROOT") and not tree.is_preterminal
    children = [c for c in map(_strip, tree.children if wrapper else [tree]) if c is not None]
    return Tree("TOP", children) if children else None


def gold_tree(tree: Tree) -> Tree:
    """The treebank's own tree for EVALB: function tags and empty elements kept
    (EVALB removes them itself), the unlabelled wrapper named TOP."""
    if tree.label in ("", "ROOT"):
        return Tree("TOP", tree.children)
    return tree if tree.label == "TOP" else Tree("TOP", [tree])


# --------------------------------------------------------------------------- linearization
XX = "XX"


def linearize(tree: Tree, pos_tags: str = "xx") -> List[str]:
    """Vinyals et al.'s depth-first bracket sequence of a (stripped) tree; the TOP root is not part of it.
    ``pos_tags``: "xx" writes every word as XX, "keep" writes its POS tag."""
    if pos_tags not in ("xx", "keep"):
        raise ValueError(f"pos_tags must be 'xx' or 'keep', not {pos_tags!r}")
    out: List[str] = []

    def walk(node: Tree):
        if node.is_preterminal:
            out.append(XX if pos_tags == "xx" else node.label)
            return
        out.append("(" + node.label)
        for child in node.children:
            walk(child)
        out.append(")" + node.label)

    for child in (tree.children if tree.label == "TOP" else [tree]):
        walk(child)
    return out


REPAIRS = ("extra_close", "label_mismatch", "unclosed", "extra_leaves", "missing_leaves", "empty_brackets")


def delinearize(tokens: Sequence[str], words: Sequence[str], tags: Optional[Sequence[str]] = None
                ) -> Tuple[Tree, Counter]:
    """A tree over ``words`` from a predicted bracket sequence, and the repairs it needed (a Counter over
    :data:`REPAIRS`; empty for a well-formed sequence).

    Tokens ``(L`` open a bracket, ``)L`` (or ``)``) close one, anything else is a word's leaf. The word's tag is
    ``tags[i]`` when given (the recipe passes the gold tags when the model predicts XX, so that EVALB deletes the
    same punctuation on both sides), else the leaf token itself."""
    repairs: Counter = Counter()
    root = Tree("TOP", [])
    stack = [root]
    n_leaves = 0

    def leaf(i: int, tok: str) -> Tree:
        return Tree(tags[i] if tags is not None else tok, [words[i]])

    for tok in tokens:
        if len(tok) > 1 and tok[0] == "(":
            node = Tree(tok[1:], [])
            stack[-1].children.append(node)
            stack.append(node)
        elif tok[:1] == ")":
            if len(stack) == 1:
                repairs["extra_close"] += 1
                continue
            node = stack.pop()
            if len(tok) > 1 and tok[1:] != node.label:
                repairs["label_mismatch"] += 1
        else:
            if n_leaves >= len(words):
                repairs["extra_leaves"] += 1
                continue
            stack[-1].children.append(leaf(n_leaves, tok))
            n_leaves += 1
    if len(stack) > 1:
        repairs["unclosed"] += len(stack) - 1
    if n_leaves < len(words):
        # attach the missing words where the sequence stopped: to the innermost open bracket,
        # else to the last top-level constituent, else to TOP (always on the right edge, so
        # the words stay in order)
        if len(stack) > 1:
            host = stack[-1]
        elif root.children and not root.children[-1].is_preterminal:
            host = root.children[-1]
        else:
            host = root
        for i in range(n_leaves, len(words)):
            host.children.append(leaf(i, XX))
        repairs["missing_leaves"] += len(words) - n_leaves

    def prune(node: Tree) -> Optional[Tree]:
        if node.is_preterminal:
            return node
        children = [c for c in (prune(child) for child in node.children) if c is not None]
        if not children:
            repairs["empty_brackets"] += 1
            return None
        node.children = children
        return node

    root.children = [c for c in (prune(child) for child in root.children) if c is not None]
    return root, repairs
