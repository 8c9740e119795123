"""The ``wanreduce`` command line: a thin layer over :mod:`wanreduce.host` and :mod:`wanreduce.sim`.

The top of the import order (spec <- hw <- host <- sim <- cli). Each module listed in :data:`COMMANDS` has
``register(subparsers)``, which adds its parser and sets ``func`` to a callable taking the parsed
``argparse.Namespace`` and returning an exit code.
"""

import argparse
import importlib
import importlib.metadata
import sys

from ..spec.errors import WanreduceError

__all__ = ["main", "build_parser", "version", "COMMANDS"]

COMMANDS = [
    "wanreduce.cli.pack",
    "wanreduce.cli.inspect",
    "wanreduce.cli.demo",
    "wanreduce.cli.schedule",
    "wanreduce.cli.sweep",
    "wanreduce.cli.rtl_add",
    "wanreduce.cli.sim_replay",
    "wanreduce.cli.emit",
    "wanreduce.cli.replay",
    "wanreduce.cli.merge",
    "wanreduce.cli.unpack",
    "wanreduce.cli.verify",
    "wanreduce.cli.verilog",
    "wanreduce.cli.cache",
    "wanreduce.cli.train",
    "wanreduce.cli.prove",
]


def version():
    """The installed distribution's version (``importlib.metadata``), or a note saying it is not installed."""
    try:
        return importlib.metadata.version("wanreduce")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


class _Parser(argparse.ArgumentParser):
    """argparse with one-line option errors (its own print the whole usage first), like every other error."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser():
    parser = _Parser(
        prog="wanreduce",
        description="FPGA in-network aggregation for training across continents: packet tools, "
        "RTL checks and the WAN sync-schedule optimizer.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except WanreduceError as exc:
        print(f"wanreduce {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"wanreduce {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `wanreduce inspect big.pcap | head` must not print a traceback.
        return 0


if __name__ == "__main__":
    sys.exit(main())
