"""Options an experiment declares beyond those every experiment takes.

An experiment lists its :class:`Option` s in ``Experiment.options``; the command
line adds exactly those to the experiment's parser (``fabric run NAME --help``),
so an option an experiment would ignore is refused there. The roce transport's
knobs are declared here, once, for the experiments whose senders are roce.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypedDict

from fabric.routing.policies import POLICIES
from fabric.traffic.model import (CONGESTION_CONTROLS, DEFAULT_ROCE_MTU, ROCE_MTUS, SPRAYING,
                                  TRANSPORTS)


class _ArgumentExtras(TypedDict, total=False):
    """The keywords :meth:`Option.add_to` passes to ``add_argument`` only when set."""

    type: Callable[[str], Any]
    choices: Sequence[Any]
    metavar: str


@dataclass(frozen=True)
class Option:
    """One command-line option: its flag, help and how its text is read.

    ``type`` raises ``argparse.ArgumentTypeError`` for a bad value, with a
    message for the user; ``default`` is what :meth:`RunContext.get` returns
    when the option was not given; ``requires`` names the flag of another
    option without which this one is refused.
    """

    flag: str
    help: str
    default: Any = None
    type: Callable[[str], Any] | None = None
    choices: Sequence[Any] | None = None
    metavar: str | None = None
    requires: str | None = None

    @property
    def dest(self) -> str:
        """The attribute name of the parsed value: ``--roce-mtu`` -> ``roce_mtu``."""
        return self.flag.lstrip("-").replace("-", "_")

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        """Add the option to ``parser``; its parsed value is None when not given."""
        extra: _ArgumentExtras = {}
        if self.type is not None:
            extra["type"] = self.type
        if self.choices is not None:
            extra["choices"] = self.choices
        if self.metavar is not None:
            extra["metavar"] = self.metavar
        parser.add_argument(self.flag, default=None, help=self.help, **extra)


CC = Option("--cc", default="swift", choices=CONGESTION_CONTROLS,
            help="congestion control of the roce transport: delay-based swift, ECN-driven "
                 "dcqcn, loss-based AIMD, or none (line rate; only a lossless fabric keeps it "
                 "from dropping) (default: swift)")
ROCE_MTU = Option("--roce-mtu", default=DEFAULT_ROCE_MTU, type=int, choices=ROCE_MTUS,
                  help=f"payload bytes per roce packet, the RoCE path MTU (default: "
                       f"{DEFAULT_ROCE_MTU}; 1024 is the largest a 1500-byte Ethernet MTU "
                       f"carries)")
SPRAY_ENTROPY = Option("--spray-entropy", default="recycle", choices=SPRAYING,
                       help="how the spray and adaptive senders pick source ports: recycling "
                            "the ones echoed as uncongested (REPS, default) or simply the next "
                            "one per packet")
ROCE_OPTIONS = (CC, ROCE_MTU, SPRAY_ENTROPY)  # every experiment whose senders spray over roce
TRANSPORT = Option("--transport", default="roce", choices=TRANSPORTS,
                   help="the hosts' transport: roce (RDMA, as the seed system runs it; "
                        "without --preset or --flow-control the seed's preset) or tcp (the "
                        "hosts' kernel TCP over a lossy fabric unless --preset or "
                        "--flow-control say otherwise) (default: roce)")


def policy_list(text: str) -> tuple[str, ...]:
    """``--policies``: comma-separated routing policies, each known and named once.

    Raises
    ------
    argparse.ArgumentTypeError
        For an unknown, repeated or missing policy.
    """
    names = tuple(name.strip() for name in text.split(","))
    unknown = [name for name in names if name not in POLICIES]
    if not text.strip() or unknown:
        raise argparse.ArgumentTypeError(
            f"unknown routing policy {unknown[0] if unknown else text!r}; "
            f"name one or more of {', '.join(POLICIES)}, comma-separated")
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"{text!r} names a policy twice")
    return names


POLICIES_OPTION = Option("--policies", type=policy_list, metavar="P,Q",
                         help=f"the routing policies to compare, comma-separated, of "
                              f"{', '.join(POLICIES)} (static: the subnet manager's planned "
                              f"routes; default: the experiment's)")


def chosen_policies(ctx: Any, default: tuple[str, ...]) -> tuple[str, ...]:
    """The routing policies a run compares: ``--policies``, or the experiment's
    ``default`` (``ctx`` a :class:`~fabric.experiment.context.RunContext`)."""
    return ctx.get(POLICIES_OPTION) or default
