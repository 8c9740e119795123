"""``wanreduce figures render|check|refresh``: the documentation's generated figures
(:mod:`wanreduce.sim.figures`)."""

import sys
from pathlib import Path

from ..sim import figures

__all__ = ["register"]


def register(sub):
    p = sub.add_parser(
        "figures",
        help="render, check or refresh the figures README.md and docs/*.md quote (docs/figures.json)",
        description="The figures the documentation quotes live in docs/figures.json with their provenance; "
        "the Markdown quotes them in generated regions (<!-- figures: NAME --> ... <!-- /figures -->). "
        "render rewrites the regions, check lists stale figures and regions that differ from their "
        "rendering (exit 1 if any), refresh reruns the command of every stale figure (each once) and "
        "renders. docs/figures.md says how to add a figure.",
    )
    p.add_argument("action", choices=("render", "check", "refresh"), help="what to do")
    p.add_argument(
        "--no-run",
        action="store_true",
        help="refresh: do not run anything, take the stale figures from their producers' last output files",
    )
    p.add_argument(
        "--only",
        default="",
        help="refresh: only the commands that contain one of these comma-separated texts "
        "(e.g. 'wanreduce demo,--only model'); their quoted figures also take a later run of the same "
        "code from the output file (a producer rerun by hand)",
    )
    p.add_argument(
        "--root",
        default=None,
        help="the checkout whose README.md, docs/ and docs/figures.json to use (default: this repository)",
    )
    p.set_defaults(func=run)


def run(args):
    root = figures.ROOT if args.root is None else Path(args.root)
    if not (root / figures.FIGURES_FILE).is_file():
        print(f"wanreduce figures: error: {root / figures.FIGURES_FILE} does not exist", file=sys.stderr)
        return 2
    try:
        if args.action == "render":
            changed = figures.render(root)
            print(
                f"figures: rendered {len(changed)} file(s)" + (f": {', '.join(changed)}" if changed else "")
            )
            return 0
        if args.action == "refresh":
            only = [part for part in args.only.split(",") if part]
            ran, failed = figures.refresh(root, run=not args.no_run, only=only)
            for cmd in failed:
                print(f"figures: failed: {cmd}", file=sys.stderr)
            print(f"figures: ran {len(ran)} command(s), {len(failed)} failed")
        problems = figures.check(root)
    except figures.FiguresError as exc:
        print(f"wanreduce figures: error: {exc}", file=sys.stderr)
        return 2
    for line in problems:
        print(line)
    if problems:
        stale = sum(line.startswith("  stale: ") for line in problems)
        regions = sum(not line.startswith(("  stale: ", "refresh with: ")) for line in problems)
        print(f"figures: {stale} stale figure(s), {regions} region(s) not current")
        return 1
    print("figures: every quoted figure is current and every region rendered")
    return 0
