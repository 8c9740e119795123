"""The host's end of a board's UART control port (``wanreduce.hw.board``'s protocol): register writes and
reads over a serial port, the board's build parameters, its configuration from a schedule file, and its
counters.

A serial port is opened with the standard library only (``termios``: raw, 8N1, the given baud rate), so a
real USB-serial adapter and a pseudo-terminal (the tests' bridge to the Verilated board top) are the same
to it. Every answer has a deadline; a port that is missing, is not a terminal, or where nothing answers in
time, is one :class:`~wanreduce.spec.errors.WanreduceError` naming the port and the problem.
"""

import os
import select
import termios
import time
import tty

from ..spec import addressing, regmap
from ..spec.errors import WanreduceError
from ..spec.protocol import UDP_PORT
from ..spec.schedfile import period_members
from . import control
from .golden import Destination

__all__ = ["BoardLink", "GEOMETRY", "board_config_writes", "read_counters", "ACK", "NAK", "BAUDS"]

ACK, NAK = 0x06, 0x15
#: Baud rates a serial port can be set to here (termios constants).
BAUDS = {
    b: getattr(termios, f"B{b}")
    for b in (9600, 19200, 38400, 57600, 115200, 230400, 460800, 921600)
    if hasattr(termios, f"B{b}")
}
#: Build parameters the board reports, by register.
GEOMETRY = {
    "width": regmap.REG_WIDTH,
    "slots": regmap.REG_SLOTS,
    "members": regmap.REG_MEMBERS,
    "slot_bytes": regmap.REG_SLOT_BYTES,
    "dests": regmap.REG_DESTS,
    "jobs": regmap.REG_JOBS,
    "rounds": regmap.REG_ROUNDS,
}


class BoardLink:
    """An open serial port to a board. ``timeout`` (seconds) bounds the wait for every answer."""

    def __init__(self, port, *, baud=115200, timeout=1.0):
        if baud not in BAUDS:
            raise WanreduceError(f"the baud rate must be one of {', '.join(map(str, BAUDS))}, not {baud}")
        self.port, self.baud, self.timeout = str(port), baud, timeout
        try:
            fd = os.open(self.port, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        except FileNotFoundError:
            raise WanreduceError(f"{self.port}: no such serial port") from None
        except IsADirectoryError:
            raise WanreduceError(f"{self.port}: is a directory, not a serial port") from None
        except PermissionError:
            raise WanreduceError(
                f"{self.port}: permission denied (is the user in the dialout group?)"
            ) from None
        except OSError as exc:
            raise WanreduceError(f"{self.port}: cannot open it ({exc.strerror})") from None
        if not os.isatty(fd):
            os.close(fd)
            raise WanreduceError(f"{self.port}: not a serial port (not a terminal device)")
        self.fd = fd
        tty.setraw(fd)
        attrs = termios.tcgetattr(fd)
        attrs[4] = attrs[5] = BAUDS[baud]
        attrs[2] = (
            (attrs[2] & ~(termios.PARENB | termios.CSTOPB | termios.CSIZE)) | termios.CS8 | termios.CLOCAL
        )
        termios.tcsetattr(fd, termios.TCSANOW, attrs)
        termios.tcflush(fd, termios.TCIOFLUSH)

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _send(self, data):
        view = memoryview(bytes(data))
        deadline = time.monotonic() + self.timeout
        while view:
            _, w, _ = select.select([], [self.fd], [], max(0.0, deadline - time.monotonic()))
            if not w:
                raise WanreduceError(f"{self.port}: the port takes no data (is a board connected?)")
            view = view[os.write(self.fd, view) :]

    def _recv(self, n, what):
        out = bytearray()
        deadline = time.monotonic() + self.timeout
        while len(out) < n:
            r, _, _ = select.select([self.fd], [], [], max(0.0, deadline - time.monotonic()))
            if not r:
                raise WanreduceError(
                    f"{self.port}: no answer from a board to {what} within {self.timeout:g} s (is the "
                    f"wanreduce bitstream loaded, at {self.baud} baud?)"
                )
            try:
                out += os.read(self.fd, n - len(out))
            except BlockingIOError:
                continue
            except OSError as exc:
                raise WanreduceError(f"{self.port}: reading failed ({exc.strerror})") from None
        return bytes(out)

    def write(self, addr, data):
        """Write register ``addr``; the board acknowledges every write."""
        self._send(b"W" + int(addr).to_bytes(2, "big") + int(data).to_bytes(4, "big"))
        answer = self._recv(1, f"a write of register {addr:#06x}")[0]
        if answer != ACK:
            raise WanreduceError(f"{self.port}: the board answered {answer:#04x} to a write of {addr:#06x}")

    def read(self, addr):
        """Read register ``addr``."""
        self._send(b"R" + int(addr).to_bytes(2, "big"))
        return int.from_bytes(self._recv(4, f"a read of register {addr:#06x}"), "big")

    def identify(self):
        """Check that a wanreduce board answers; return its build parameters (:data:`GEOMETRY`)."""
        ident = self.read(regmap.REG_ID)
        if ident != regmap.ID_VALUE:
            raise WanreduceError(
                f"{self.port}: the device answers but is not a wanreduce board of register map "
                f"{regmap.ID_VALUE:#010x} (ID {ident:#010x})"
            )
        return {name: self.read(addr) for name, addr in GEOMETRY.items()}


def board_config_writes(schedule, rank, geometry, *, job_ids=(0,), mac=None, ip=None, destinations=None):
    """The register writes that load rank ``rank``'s part of a gather ``schedule`` into a board of build
    parameters ``geometry``: every job id of ``job_ids`` runs the schedule's period, each round's group
    summed in the schedule's order; RESULTs go to the site's host group (default) or ``destinations``."""
    if schedule.lean is not None:
        raise WanreduceError("the board takes gather schedules; this one is a root-aggregation schedule")
    if not 0 <= rank < schedule.n:
        raise WanreduceError(f"rank {rank} is not a site of the schedule (it has {schedule.n} sites)")
    if len(job_ids) > geometry["jobs"]:
        raise WanreduceError(f"the board holds {geometry['jobs']} jobs, not {len(job_ids)}")
    if destinations is None:
        group = addressing.site_group_ip(rank)
        destinations = [Destination(addressing.multicast_mac(group), group, UDP_PORT)]
    period = period_members(schedule, rank)
    return control.config_writes(
        rank=rank,
        jobs=dict.fromkeys(job_ids, period),
        destinations=destinations,
        mac=mac or addressing.aggregator_mac(rank),
        ip=ip or addressing.aggregator_ip(rank),
        core=geometry,
    )


def read_counters(link):
    """``(core counters, board registers)``: the core's counters by name, the MAC counters and link."""
    core = control.decode_counters([link.read(a) for a in control.counter_reads()])
    board = control.decode_board([link.read(a) for a in control.board_reads()])
    return core, board
