#!/usr/bin/env python
"""Run a command and file what it printed as a results file for README.

    python scripts/record_result.py recipes/results/tokens_per_update_newstest.json [--note TEXT] -- \\
        python scripts/tokens_per_update.py --src ... --max-tokens 3125 --devices 8

writes the JSON file ``{"command", "commit", "machine", "date", "seconds",
"result"}``, where ``result`` is the command's stdout parsed as JSON (or its
text), and ``--copy FILE`` instead files an existing JSON output (such as a
recipe's results.json) under the command given. Every number README reports
as measured comes from such a file; ``python scripts/readme_tables.py`` makes
README's tables from them.
"""
import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # until the tooling is one installed package (#13)

from attn_kit.results import write_results_file  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("output", type=Path, help="the results file to write (JSON)")
    p.add_argument("--copy", type=Path, metavar="JSON", help="file this JSON output instead of running anything")
    p.add_argument("--note", help="a sentence saying what the numbers are")
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args, cmd = p.parse_args(argv[:split]), argv[split + 1:]
    if not cmd:
        p.error("give the command after -- (with --copy: the command that made the file)")
    extra = {"note": args.note} if args.note else {}
    if args.copy:
        try:
            result = json.loads(args.copy.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            print(f"error: cannot read {args.copy}: {exc}", file=sys.stderr)
            return 1
        write_results_file(args.output, cmd, result, **extra)
        return 0
    start = time.time()
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    except OSError as exc:
        print(f"error: cannot run {cmd[0]}: {exc.strerror}", file=sys.stderr)
        return 1
    if proc.returncode != 0:
        print(f"error: the command failed (exit {proc.returncode}); nothing recorded", file=sys.stderr)
        return proc.returncode
    try:
        result = json.loads(proc.stdout)
    except ValueError:
        result = proc.stdout
    write_results_file(args.output, cmd, result, seconds=round(time.time() - start, 1), **extra)
    print(f"recorded {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
