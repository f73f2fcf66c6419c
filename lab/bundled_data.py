"""Make the bundled EN-DE corpus (data/tatoeba-en-de/) from Tatoeba's deu-eng.txt, or the small EN-FR
sample the --smoke recipe builds its fake WMT archives from (--lang fr --source .../fra-eng.txt).

Development tool: it reads manythings.org's Tatoeba export (2018-05-13, CC-BY 2.0); the recipe reads
only the compressed splits this writes. Pairs are grouped by their English sentence, the groups
shuffled with a fixed seed, and whole groups go to test, then valid, then train, so no English
sentence occurs in two splits.
"""
import argparse
import lzma
import random
from collections import OrderedDict
from pathlib import Path

from attn_kit import options
from attn_kit.cli import ArgumentParser, Number, add_force_option, add_output_option, check_output
from attn_kit.checkout import REPO



def main(argv=None):
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source", default=REPO.parent / "shared/data/tatoeba/deu-eng.txt", type=Path,
                   help="Tatoeba deu-eng.txt (English<TAB>German per line)")
    add_output_option(p, "output folder (default data/tatoeba-en-de)", default=REPO / "data/tatoeba-en-de")
    options.add(p, "seed", "of the shuffle; default 1", checked="here", default=1)
    p.add_argument("--test", type=Number(int, minimum=1), default=2000, help="test pairs (default 2000)")
    p.add_argument("--valid", type=Number(int, minimum=1), default=1000, help="valid pairs (default 1000)")
    p.add_argument("--train", type=Number(int, minimum=1), default=None,
                   help="keep at most this many train pairs (default all)")
    p.add_argument("--lang", default="de", help="the non-English language, for file names (default de)")
    add_force_option(p, "the --output folder's files")
    args = p.parse_args(argv)
    check_output(args.out, "--output", args.force, folder=True)

    groups = OrderedDict()
    with open(args.source, encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) >= 2 and fields[0].strip() and fields[1].strip():
                groups.setdefault(fields[0].strip(), []).append(fields[1].strip())
    keys = list(groups)
    random.Random(args.seed).shuffle(keys)
    splits = {"test": [], "valid": [], "train": []}
    for en in keys:
        name = ("test" if len(splits["test"]) < args.test
                else "valid" if len(splits["valid"]) < args.valid else "train")
        splits[name].extend((en, de) for de in groups[en])
    args.out.mkdir(parents=True, exist_ok=True)
    for name, pairs in splits.items():
        if name == "train":
            random.Random(args.seed).shuffle(pairs)
            pairs = pairs[:args.train]
        with lzma.open(args.out / f"{name}.en-{args.lang}.tsv.xz", "wt", encoding="utf-8", preset=9) as f:
            for en, other in pairs:
                f.write(f"{en}\t{other}\n")
        print(f"{name}: {len(pairs)} pairs")
