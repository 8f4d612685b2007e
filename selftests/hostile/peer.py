#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""A hostile iWARP peer for rsiw's receive path (selftests/hostile-peer.sh).

It connects to the test ULP's server (selftests/ulp, rsiw_ulp.ko) over plain
TCP, does the MPA exchange itself (RFC 5044 MPA Request, revision 2 with the
RFC 6581 enhanced IRD/ORD data, CRC on, no Markers), speaks the ULP's control
protocol (selftests/ulp/proto.rs) in FPDUs it frames itself, and then sends
one FPDU that breaks a rule of RDMAP, DDP or MPA. It expects the device to
answer with a Terminate carrying the right Layer/EType/Code, to send nothing
else, and to close the TCP connection.

    peer.py --addr 198.18.0.1 --port 20887 --expect 1/1/0x01 write-beyond
    peer.py --addr 198.18.0.1 --port 20887 --serve   # cases from stdin
    peer.py --addr 198.18.0.2 --port 20893 --respond ird --expect 2/0/0x06
                            # responder: a Reply rsiw must answer with a Terminate
    peer.py --list          # the cases and what they send
    peer.py --self-test     # CRC32c and framing against known vectors (host)

Only the standard library is used: the test VM shares the host's Python.
Status of a case: 0 when every expectation held, 1 when one did not, 2 when
the case could not be set up (connection, MPA, control protocol). With
--serve, each stdin line "CASE EXPECT" runs a case, whose output ends with a
line "done STATUS" (one interpreter for all cases: under TCG, starting
Python takes seconds).
"""

import argparse
import socket
import struct
import sys
import time
import traceback

# ---------------------------------------------------------------- CRC32c

# CRC32c (Castagnoli), as MPA uses it (RFC 5044 section 4.4, the iSCSI CRC
# of RFC 3720): reflected polynomial 0x82F63B78, register preset to all
# ones, result inverted.


def _crc_table():
    table = []
    for n in range(256):
        reg = n
        for _ in range(8):
            reg = (reg >> 1) ^ (0x82F63B78 if reg & 1 else 0)
        table.append(reg)
    return table


CRC_TABLE = _crc_table()


def crc32c(data):
    """The CRC32c of data (bytes)."""
    reg = 0xFFFFFFFF
    for b in data:
        reg = CRC_TABLE[(reg ^ b) & 0xFF] ^ (reg >> 8)
    return reg ^ 0xFFFFFFFF


def crc_wire(crc):
    """The four CRC octets as MPA sends them: least significant octet first
    (drivers/rsiw/proto/crc.rs to_wire; selftests/proto/tests/vectors.rs)."""
    return struct.pack("<I", crc)


# ---------------------------------------------------------------- wire formats

KEY_REQ = b"MPA ID Req Frame"
KEY_REP = b"MPA ID Rep Frame"
MPA_M, MPA_C, MPA_R, MPA_S = 0x80, 0x40, 0x20, 0x10
IRD_ORD_MAX = 0x3FFF

# DDP control octet: T (tagged), L (last), DV = 1.
DDP_T, DDP_L, DDP_DV = 0x80, 0x40, 0x01
TAGGED_HDR_LEN, UNTAGGED_HDR_LEN = 14, 18
READ_REQ_LEN = 28

# RDMAP opcodes (RFC 5040 section 4.3); the control octet is RV=1 in the
# top two bits and the opcode in the low nibble.
OP_WRITE, OP_READ_REQ, OP_READ_RESP, OP_SEND, OP_SEND_INV = 0, 1, 2, 3, 4
OP_TERMINATE = 7
OP_NAMES = {0: "RDMA Write", 1: "Read Request", 2: "Read Response", 3: "Send",
            4: "Send with Invalidate", 5: "Send with SE",
            6: "Send with SE and Invalidate", 7: "Terminate"}
QN_SEND, QN_READ, QN_TERM = 0, 1, 2


def rdmap_ctrl(op):
    return 0x40 | op


def tagged_hdr(op, stag, to, last=True):
    """A tagged DDP header (RFC 5041 section 4.2) carrying RDMAP opcode op."""
    ctrl = DDP_T | (DDP_L if last else 0) | DDP_DV
    return bytes([ctrl, rdmap_ctrl(op)]) + struct.pack(">IQ", stag, to & (2**64 - 1))


def untagged_hdr(op, qn, msn, mo=0, inv_stag=0, last=True):
    """An untagged DDP header (RFC 5041 section 4.3) carrying RDMAP opcode op."""
    ctrl = (DDP_L if last else 0) | DDP_DV
    return bytes([ctrl, rdmap_ctrl(op)]) + struct.pack(">IIII", inv_stag, qn, msn, mo)


def read_req_hdr(sink_stag, sink_to, size, src_stag, src_to):
    """The RDMA Read Request header (RFC 5040 section 4.4)."""
    return struct.pack(">IQIIQ", sink_stag, sink_to, size, src_stag, src_to & (2**64 - 1))


def fpdu(ulpdu, bad_crc=False):
    """Frames a ULPDU: ULPDU_Length | ULPDU | PAD | CRC (no Markers)."""
    body = struct.pack(">H", len(ulpdu)) + ulpdu
    body += bytes(-len(body) % 4)
    crc = crc32c(body)
    if bad_crc:
        crc ^= 0x00010000
    return body + crc_wire(crc)


# ---------------------------------------------------------------- the ULP's protocol

# selftests/ulp/proto.rs: 48-octet messages, magic RUL1, a type octet, three
# pad octets and five little-endian u64 arguments.
MSG_LEN = 48
MAGIC = b"RUL1"
K_TARGET, K_TARGET_IS, K_VERIFY, K_EXPECT_SEND, K_READY, K_STATUS, K_ROTATE = 1, 2, 3, 4, 5, 6, 8
K_GLOBAL_KEY = 9
ACC_READ, ACC_WRITE = 1, 2
SEALED = 1


def msg(kind, *args):
    a = list(args) + [0] * (5 - len(args))
    return MAGIC + bytes([kind, 0, 0, 0]) + struct.pack("<5Q", *a)


def parse_msg(b):
    if len(b) != MSG_LEN or b[:4] != MAGIC:
        return None
    return b[4], struct.unpack("<5Q", b[8:])


def pattern(seed, off):
    """proto.rs pattern(): the data byte at offset off of a region filled with seed."""
    m = 0xFFFFFFFF
    x = ((off * 0x9E3779B1) & m) ^ ((seed * 0x85EBCA77) & m)
    x = x ^ (x >> 15) ^ (x >> 7)
    return (x ^ ((off & m) >> 8)) & 0xFF


def pattern_bytes(seed, off, n):
    return bytes(pattern(seed, off + i) for i in range(n))


HELLO = b"RSIWULP1"
# The same, asking the server to give the connection's PD a global rkey
# (IB_PD_UNSAFE_GLOBAL_RKEY), which K_GLOBAL_KEY then reveals.
HELLO_GLOBAL_RKEY = b"RSIWULPG"
TIMEOUT = 20.0
# A narrow connection (Conn(narrow=True)): the MSS it announces and its receive buffer.
NARROW_MSS = 536
NARROW_RCVBUF = 8192


# ---------------------------------------------------------------- errors


class SetupError(Exception):
    """The case could not be set up (not a verdict on the device)."""


class Mismatch(Exception):
    """The device did not behave as the case expects."""


class Closed(Exception):
    """The peer closed the TCP connection: how ("eof" or "reset")."""

    def __init__(self, how, got=b""):
        super().__init__(how)
        self.how = how
        self.got = got


# ---------------------------------------------------------------- one connection


class Fpdu:
    """A received FPDU, parsed."""

    def __init__(self, ulpdu):
        self.ulpdu = ulpdu
        c = ulpdu[0]
        self.tagged = bool(c & DDP_T)
        self.last = bool(c & DDP_L)
        self.dv = c & 3
        self.rv = ulpdu[1] >> 6
        self.op = ulpdu[1] & 0x0F
        if self.tagged:
            self.stag, self.to = struct.unpack(">IQ", ulpdu[2:14])
            self.payload = ulpdu[14:]
        else:
            self.inv, self.qn, self.msn, self.mo = struct.unpack(">IIII", ulpdu[2:18])
            self.payload = ulpdu[18:]

    def describe(self):
        name = OP_NAMES.get(self.op, "opcode %d" % self.op)
        if self.tagged:
            return "%s stag %#x to %#x, %d octets" % (name, self.stag, self.to, len(self.payload))
        return "%s qn %d msn %d mo %d, %d octets" % (name, self.qn, self.msn, self.mo,
                                                    len(self.payload))


# Every connection a case opened; closed when the case ends, whatever happened.
OPEN = []


class Conn:
    """An MPA connection to the ULP server, with its DDP sequence numbers."""

    def __init__(self, addr, port, log, rtr="write", crc=True, ird=4, ord_=4, hello=None,
                 any_reply_data=False, narrow=False):
        self.log = log
        self.msn = {QN_SEND: 1, QN_READ: 1, QN_TERM: 1}
        self.buf = b""
        try:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            if narrow:
                # A small MSS keeps the server's send buffer small (Linux sizes it from
                # the MSS), and a small receive buffer keeps the window small: the server
                # can then hand TCP only some KiB ahead of what this peer has read.
                self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, NARROW_MSS)
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, NARROW_RCVBUF)
            self.sock.settimeout(TIMEOUT)
            self.sock.connect((addr, port))
        except OSError as e:
            self.sock.close()
            raise SetupError("TCP connect to %s:%d: %s" % (addr, port, e)) from e
        OPEN.append(self.sock)
        # Each FPDU goes out at once (Nagle would hold a request behind the RTR).
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(TIMEOUT)
        self.name = "%s:%d" % self.sock.getsockname()
        self._mpa(rtr, crc, ird, ord_, hello or HELLO, any_reply_data)

    @classmethod
    def accepted(cls, sock, log):
        """A connection on a socket this peer accepted, before any MPA exchange."""
        self = cls.__new__(cls)
        self.log = log
        self.msn = {QN_SEND: 1, QN_READ: 1, QN_TERM: 1}
        self.buf = b""
        self.sock = sock
        OPEN.append(sock)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(TIMEOUT)
        self.name = "%s:%d" % sock.getpeername()
        return self

    # -- MPA

    def _mpa(self, rtr, crc, ird, ord_, hello, any_reply_data=False):
        """The MPA exchange as initiator. The Reply's private data must be the test
        ULP's HELLO unless any_reply_data (another ULP's listener)."""
        p2p = rtr != "none"
        w0 = (0x8000 if p2p else 0) | (0x4000 if rtr == "send" else 0) | ird
        w1 = (0x8000 if rtr == "write" else 0) | ord_
        pd = struct.pack(">HH", w0, w1) + hello
        flags = (MPA_C if crc else 0) | MPA_S
        self.sock.sendall(KEY_REQ + bytes([flags, 2]) + struct.pack(">H", len(pd)) + pd)
        flags, rev, pd = self.recv_mpa_frame(KEY_REP, "Reply")
        pd_len = len(pd)
        if flags & MPA_R:
            raise SetupError("MPA Reply rejects the connection: private data %r" % pd)
        if flags & MPA_M:
            raise SetupError("the Reply asks for Markers, which this peer does not send")
        if not flags & MPA_C and not crc:
            raise SetupError("no CRC negotiated; this peer always sends CRCs")
        if rev != 2 or not flags & MPA_S or pd_len < 4:
            raise SetupError("not an enhanced revision 2 Reply: flags %#x rev %d" % (flags, rev))
        w0, w1 = struct.unpack(">HH", pd[:4])
        self.peer_ird, self.peer_ord = w0 & IRD_ORD_MAX, w1 & IRD_ORD_MAX
        self.log("mpa: %s: reply rev %d flags %#x ird %d ord %d rtr %s private data %r" % (
            self.name, rev, flags, self.peer_ird, self.peer_ord,
            "".join(c for c, on in (("s", w0 & 0x4000), ("w", w1 & 0x8000), ("r", w1 & 0x4000))
                    if on) or "-", pd[4:]))
        if pd[4:12] != HELLO and not any_reply_data:
            raise SetupError("the server's private data is not %r" % HELLO)
        if p2p:
            offered_write, offered_send = bool(w1 & 0x8000), bool(w0 & 0x4000)
            if rtr == "write" and offered_write:
                self.send_raw(fpdu(tagged_hdr(OP_WRITE, 0, 0)))
            elif rtr == "send" and offered_send:
                self.send_raw(fpdu(self.untagged(OP_SEND, QN_SEND)))
            else:
                raise SetupError("the responder does not accept a %s RTR" % rtr)

    def recv_mpa_frame(self, key, what):
        """The peer's MPA Request or Reply (by its key): (flags, rev, private data)."""
        try:
            hdr = self.recv_exact(20)
        except Closed as e:
            raise SetupError("connection closed (%s) instead of an MPA %s" % (e.how, what)) from e
        if hdr[:16] != key:
            raise SetupError("no MPA %s key: %r" % (what, hdr[:16]))
        flags, rev, pd_len = hdr[16], hdr[17], struct.unpack(">H", hdr[18:20])[0]
        return flags, rev, self.recv_exact(pd_len) if pd_len else b""

    # -- raw I/O

    def send_raw(self, b):
        self.sock.sendall(b)

    def recv_exact(self, n, timeout=TIMEOUT):
        deadline = time.monotonic() + timeout
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Mismatch("timed out after %.0f s waiting for %d octets (have %d)"
                               % (timeout, n, len(self.buf)))
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                continue
            except ConnectionResetError as e:
                raise Closed("reset", self.buf) from e
            if not chunk:
                raise Closed("eof", self.buf)
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv_fpdu(self, timeout=TIMEOUT):
        """The next FPDU, its CRC checked."""
        head = self.recv_exact(2, timeout)
        n = struct.unpack(">H", head)[0]
        pad = -(2 + n) % 4
        rest = self.recv_exact(n + pad + 4, timeout)
        ulpdu, crc = rest[:n], rest[n + pad:]
        want = crc32c(head + rest[:n + pad])
        if crc != crc_wire(want):
            raise Mismatch("received FPDU with a bad CRC: %s, computed %s"
                           % (crc.hex(), crc_wire(want).hex()))
        if n < (TAGGED_HDR_LEN if ulpdu and ulpdu[0] & DDP_T else UNTAGGED_HDR_LEN):
            raise Mismatch("received FPDU with ULPDU_Length %d: %s" % (n, ulpdu.hex()))
        return Fpdu(ulpdu)

    # -- messages

    def untagged(self, op, qn, msn=None, mo=0, last=True, inv_stag=0):
        """An untagged header taking the queue's next MSN unless msn is given."""
        if msn is None:
            msn = self.msn[qn]
            self.msn[qn] += 1
        return untagged_hdr(op, qn, msn, mo, inv_stag=inv_stag, last=last)

    def send(self, payload, **kw):
        """Sends one Send message in one FPDU; returns the ULPDU."""
        u = self.untagged(OP_SEND, QN_SEND, kw.pop("msn", None)) + payload
        self.send_raw(fpdu(u, **kw))
        return u

    def send_inv(self, payload, inv_stag):
        """Sends one Send with Invalidate of inv_stag in one FPDU; returns the ULPDU."""
        u = self.untagged(OP_SEND_INV, QN_SEND, inv_stag=inv_stag) + payload
        self.send_raw(fpdu(u))
        return u

    def read_response(self, sink_stag, sink_to, payload):
        """Sends a one-segment RDMA Read Response; returns the ULPDU."""
        u = tagged_hdr(OP_READ_RESP, sink_stag, sink_to) + payload
        self.send_raw(fpdu(u))
        return u

    def skip_read_responses(self, sink_stag):
        """Reads the Read Response segments to sink_stag that come first and
        leaves the next other FPDU unread. Their CRCs are not checked (in
        pure Python that is slow) and their payload is dropped. Returns how
        many segments and octets there were."""
        segs = octets = 0
        while True:
            head = self.recv_exact(2 + 14)
            self.buf = head + self.buf
            n = struct.unpack(">H", head[:2])[0]
            if not head[2] & DDP_T or head[3] & 0x0F != OP_READ_RESP:
                return segs, octets
            stag = struct.unpack(">I", head[4:8])[0]
            if stag != sink_stag:
                raise Mismatch("Read Response to STag %#x, our sink is %#x" % (stag, sink_stag))
            self.recv_exact(2 + n + (-(2 + n) % 4) + 4)
            segs += 1
            octets += n - TAGGED_HDR_LEN

    def write(self, stag, to, payload, **kw):
        u = tagged_hdr(OP_WRITE, stag, to) + payload
        self.send_raw(fpdu(u, **kw))
        return u

    def read_request(self, sink_stag, sink_to, size, src_stag, src_to, **kw):
        u = self.untagged(OP_READ_REQ, QN_READ, kw.pop("msn", None)) + read_req_hdr(
            sink_stag, sink_to, size, src_stag, src_to)
        self.send_raw(fpdu(u, **kw))
        return u

    def expect_send(self):
        """The server's next message: a Send of one control message."""
        f = self.recv_fpdu()
        if f.tagged or f.op != OP_SEND or not f.last or f.qn != QN_SEND:
            raise SetupError("expected a control Send, got %s" % f.describe())
        m = parse_msg(f.payload)
        if m is None:
            raise SetupError("the server sent something else than a control message: %r"
                             % f.payload)
        return m

    def request(self, kind, *args):
        """Sends a control request and returns the reply (kind, args)."""
        self.send(msg(kind, *args))
        try:
            return self.expect_send()
        except Closed as e:
            raise SetupError("connection closed (%s) while waiting for the reply to request %d"
                             % (e.how, kind)) from e

    def target(self, length, seed, access):
        """Asks for a sealed target region: returns (iova, rkey, length)."""
        kind, a = self.request(K_TARGET, length, seed, access, SEALED)
        if kind != K_TARGET_IS:
            raise SetupError("target request answered with type %d %r" % (kind, a))
        self.log("target: iova %#x rkey %#x len %d seed %#x access %d"
                 % (a[0], a[1], a[2], seed, access))
        return a[0], a[1], a[2]

    def rotate(self):
        kind, a = self.request(K_ROTATE)
        if kind != K_TARGET_IS:
            raise SetupError("rotate request answered with type %d %r" % (kind, a))
        self.log("rotated: iova %#x rkey %#x" % (a[0], a[1]))
        return a[0], a[1], a[2]

    def expect_recv(self, length, seed=0):
        """Has the server post one data receive of length octets (checked
        against pattern(seed) on completion unless seed is 0) ahead of its next
        control receive: our next Send lands in it."""
        kind, a = self.request(K_EXPECT_SEND, length, 1, seed, 1, 0)
        if kind != K_READY:
            raise SetupError("expect-send request answered with type %d %r" % (kind, a))
        self.log("the server posted a data receive of %d octets" % length)

    def verify(self, length, seed):
        kind, a = self.request(K_VERIFY, length, seed)
        if kind != K_STATUS or a[0] != 0:
            raise Mismatch("the server's verify failed: type %d status %r" % (kind, a))
        self.log("verify: the server's region holds seed %#x" % seed)

    def read(self, sink_stag, sink_to, size, src_stag, src_to):
        """An RDMA Read; returns the data of the Read Response."""
        self.read_request(sink_stag, sink_to, size, src_stag, src_to)
        data = b""
        while True:
            f = self.recv_fpdu()
            if not f.tagged or f.op != OP_READ_RESP or f.stag != sink_stag:
                raise Mismatch("expected a Read Response, got %s" % f.describe())
            if f.to != sink_to + len(data):
                raise Mismatch("Read Response at TO %#x, expected %#x"
                               % (f.to, sink_to + len(data)))
            data += f.payload
            if f.last:
                return data

    def close_clean(self):
        """Closes our half and waits for the device to close its half."""
        self.sock.shutdown(socket.SHUT_WR)
        try:
            while True:
                f = self.recv_fpdu()
                raise Mismatch("unexpected FPDU after our FIN: %s" % f.describe())
        except Closed as e:
            self.log("closed: %s after our FIN" % e.how)
        self.sock.close()

    def close(self):
        self.sock.close()


# ---------------------------------------------------------------- the verdict


def parse_expect(s):
    """'L/E/C' (numbers in any base Python reads) into a tuple, 'any' into None."""
    if s == "any":
        return None
    parts = s.split("/")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError("expected LAYER/ETYPE/CODE or any: %r" % s)
    return tuple(int(p, 0) for p in parts)


# Layer/EType/Code triples whose offending segment cannot be read (catastrophic,
# version and opcode errors) or was not received intact (every MPA error, CRC
# included): their Terminate copies no header. Every other Terminate of the
# device under test must copy the offending DDP header with its length (M, D),
# as rsiw does (RFC 5040 4.8, RFC 5041 7.1). A Read Request refused for its
# source or sink (RDMAP remote protection, 0/1/x) or beyond the IRD (1/2/0x02)
# must also carry its RDMA Read header (R); R is allowed on any other error of
# a Read Request whose header rsiw had received, and never elsewhere.
NO_HEADER_COPIES = {(0, 0, 0x00), (0, 2, 0x05), (0, 2, 0x06), (1, 0, 0x00),
                    (1, 1, 0x04), (1, 2, 0x06)}


def header_copies_due(expect, offending):
    """(M and D due, R: True due, None allowed, False wrong) for a Terminate
    expect answering offending."""
    if expect[0] == 2 or expect in NO_HEADER_COPIES or len(offending) < 2:
        return False, False
    if offending[0] & DDP_T or offending[1] & 0x0F != OP_READ_REQ:
        return True, False
    if expect[:2] == (0, 1) or expect == (1, 2, 0x02):
        return True, True
    return True, None


def expect_terminate(conn, expect, offending, log, exact=None):
    """The device's answer to offending (the ULPDU we sent): a Terminate with
    the Layer/EType/Code in expect (None: any, e.g. from the C siw), then the
    end of the stream. With expect, its header copies must be as rsiw makes
    them (header_copies_due). With exact (a ULPDU), the Terminate must be
    that, octet for octet."""
    t0 = time.monotonic()
    try:
        f = conn.recv_fpdu()
    except Closed as e:
        raise Mismatch("the connection was closed (%s) without a Terminate" % e.how) from e
    if f.op != OP_TERMINATE:
        raise Mismatch("expected a Terminate, got %s" % f.describe())
    if f.tagged or f.qn != QN_TERM or f.msn != 1 or f.mo != 0 or not f.last:
        raise Mismatch("Terminate with a wrong DDP header: %s" % f.ulpdu[:18].hex())
    if f.dv != 1 or f.rv != 1:
        raise Mismatch("Terminate with DDP version %d, RDMAP version %d" % (f.dv, f.rv))
    body = f.payload
    if len(body) < 4:
        raise Mismatch("Terminate body of %d octets" % len(body))
    layer, etype, code = body[0] >> 4, body[0] & 0xF, body[1]
    m, d, r = bool(body[2] & 0x80), bool(body[2] & 0x40), bool(body[2] & 0x20)
    got = "%d/%d/%#04x" % (layer, etype, code)
    notes = []
    if d:
        # The terminated DDP header, after the DDP Segment Length (RFC 5040 4.8).
        seg_len = struct.unpack(">H", body[4:6])[0]
        hl = TAGGED_HDR_LEN if body[6] & DDP_T else UNTAGGED_HDR_LEN
        copied = body[6:6 + hl]
        if m and seg_len != len(offending):
            raise Mismatch("Terminate %s names DDP Segment Length %d, we sent %d"
                           % (got, seg_len, len(offending)))
        if copied != offending[:hl]:
            raise Mismatch("Terminate %s copies DDP header %s, we sent %s"
                           % (got, copied.hex(), offending[:hl].hex()))
        notes.append("our DDP header copied")
        if r:
            if body[6 + hl:6 + hl + READ_REQ_LEN] != offending[hl:hl + READ_REQ_LEN]:
                raise Mismatch("Terminate %s copies a wrong Read Request header" % got)
            notes.append("our Read Request header copied")
    log("terminate: layer %d etype %d code %#04x m %d d %d r %d%s" % (
        layer, etype, code, m, d, r, "".join(", " + n for n in notes)))
    if expect is not None and (layer, etype, code) != expect:
        raise Mismatch("Terminate %s, expected %d/%d/%#04x" % ((got,) + expect))
    if expect is not None:
        md_due, r_due = header_copies_due(expect, offending)
        if (m, d) != (md_due, md_due) or (r_due is not None and r != r_due):
            raise Mismatch("Terminate %s with M %d D %d R %d, expected M %d D %d R %s"
                           % (got, m, d, r, md_due, md_due,
                              "0 or 1" if r_due is None else int(r_due)))
    if exact is not None:
        if f.ulpdu != exact:
            raise Mismatch("Terminate ULPDU %s, expected %s" % (f.ulpdu.hex(), exact.hex()))
        notes.append("every octet as expected")
    # Nothing may follow the Terminate: the device closes the stream.
    try:
        while True:
            g = conn.recv_fpdu()
            raise Mismatch("the device sent %s after its Terminate" % g.describe())
    except Closed as e:
        if e.got:
            raise Mismatch("%d stray octets after the Terminate" % len(e.got)) from e
        how = e.how
    ms = (time.monotonic() - t0) * 1000
    log("closed: %s, %.0f ms after the offending FPDU" % (how, ms))
    return "Terminate %s (%s), then %s" % (got, ", ".join(notes) or "no headers", how)


# ---------------------------------------------------------------- the cases

REGION = 8192
SEED = 0x5eed0001
SEED_B = 0x5eed0002
RECV = 64  # the data receive of the Send cases
SINK_STAG = 0x00C0FF01  # the sink of our Read Requests (we place nothing)


def against(seed, n, off=0):
    """n octets differing from pattern(seed) at every offset: anything placed shows."""
    return bytes(b ^ 0xFF for b in pattern_bytes(seed, off, n))


def one(args, log, access=ACC_READ | ACC_WRITE):
    c = Conn(args.addr, args.port, log, rtr=args.rtr)
    iova, rkey, length = c.target(REGION, SEED, access)
    return c, iova, rkey, length


def case_control(args, log):
    """No hostility: a Write and a Read that are allowed, checked end to end
    (proves the framing and CRC of this peer), then an orderly close."""
    c = Conn(args.addr, args.port, log, rtr=args.rtr)
    # Not sealed: this region is written on purpose.
    kind, a = c.request(K_TARGET, REGION, SEED, ACC_READ | ACC_WRITE, 0)
    if kind != K_TARGET_IS:
        raise SetupError("target request answered with type %d" % kind)
    iova, rkey = a[0], a[1]
    data = pattern_bytes(SEED_B, 0, REGION)
    for off in range(0, REGION, 1024):
        c.write(rkey, iova + off, data[off:off + 1024])
    c.verify(REGION, SEED_B)
    got = c.read(SINK_STAG, 0x1000, REGION, rkey, iova)
    if got != data:
        raise Mismatch("Read Response data differ from what was written")
    log("read: %d octets as written" % len(got))
    c.expect_recv(RECV, SEED_B)
    c.send(pattern_bytes(SEED_B, 0, RECV))
    kind, a = c.expect_send()
    if kind != K_STATUS or a[0] != 0:
        raise Mismatch("the server's data receive failed its check: type %d %r" % (kind, a))
    log("send: the server received %d octets as sent" % RECV)
    c.close_clean()
    return "Write, Verify, Read of %d octets, Send of %d, orderly close" % (REGION, RECV)


def case_audit_check(args, log):
    """No hostility, but an allowed Write into a sealed region: the server's
    audit must count it as tampered (proves the audit sees placement)."""
    c, iova, rkey, length = one(args, log)
    c.write(rkey, iova + length // 2, against(SEED, 32, length // 2))
    c.verify(length // 2, SEED)
    c.close_clean()
    return "allowed Write of 32 octets into the sealed region, orderly close"


def hostile(fn):
    """A case that sends one offending FPDU on a sealed target's connection."""

    def run(args, log):
        c, iova, rkey, length = one(args, log, getattr(fn, "access", ACC_READ | ACC_WRITE))
        offending = fn(c, iova, rkey, length)
        return expect_terminate(c, args.expect, offending, log)

    run.__doc__ = fn.__doc__
    return run


def with_access(access):
    def deco(fn):
        fn.access = access
        return fn
    return deco


@hostile
def case_write_beyond(c, iova, rkey, n):
    """RDMA Write of 16 octets at the last 8 of the region: past its end."""
    return c.write(rkey, iova + n - 8, against(SEED, 16, n - 8))


@hostile
def case_write_before(c, iova, rkey, n):
    """RDMA Write of 16 octets starting 8 before the region's base."""
    return c.write(rkey, iova - 8, against(SEED, 16))


@hostile
def case_write_to_wrap(c, iova, rkey, n):
    """RDMA Write whose Tagged Offset plus length wraps 2^64."""
    return c.write(rkey, 2**64 - 8, against(SEED, 16))


@hostile
def case_write_bad_key(c, iova, rkey, n):
    """RDMA Write under the region's STag with a wrong key octet."""
    return c.write(rkey ^ 0x5A, iova, against(SEED, 64))


@hostile
def case_write_no_stag(c, iova, rkey, n):
    """RDMA Write under an STag whose index names no region."""
    return c.write(0xFFFFF000 | (rkey & 0xFF), iova, against(SEED, 64))


@hostile
@with_access(ACC_READ)
def case_write_read_only(c, iova, rkey, n):
    """RDMA Write into a region registered for remote read only."""
    return c.write(rkey, iova, against(SEED, 64))


@hostile
def case_write_bad_crc(c, iova, rkey, n):
    """RDMA Write of 64 octets inside the region, with a wrong CRC."""
    return c.write(rkey, iova + 256, against(SEED, 64, 256), bad_crc=True)


@hostile
def case_write_invalidated(c, iova, rkey, n):
    """RDMA Write under the key the server invalidated (LOCAL_INV, then
    REG_MR under the next key)."""
    _, new, _ = c.rotate()
    if new == rkey:
        raise SetupError("the rotated key is the old one: %#x" % new)
    return c.write(rkey, iova, against(SEED, 64))


def case_write_wrong_pd(args, log):
    """RDMA Write on connection B under connection A's STag: the region is
    valid but in A's protection domain. A stays intact and works on."""
    a = Conn(args.addr, args.port, lambda s: log("A " + s), rtr=args.rtr)
    a_iova, a_rkey, n = a.target(REGION, SEED, ACC_READ | ACC_WRITE)
    blog = lambda s: log("B " + s)  # noqa: E731
    b = Conn(args.addr, args.port, blog, rtr=args.rtr)
    b.target(REGION, SEED_B, ACC_READ | ACC_WRITE)
    off = b.write(a_rkey, a_iova, against(SEED, 64))
    verdict = expect_terminate(b, args.expect, off, blog)
    a.verify(REGION, SEED)
    a.close_clean()
    return verdict + "; A unharmed"


def case_read_wrong_pd(args, log):
    """RDMA Read Request on connection B of connection A's region."""
    a = Conn(args.addr, args.port, lambda s: log("A " + s), rtr=args.rtr)
    a_iova, a_rkey, n = a.target(REGION, SEED, ACC_READ | ACC_WRITE)
    blog = lambda s: log("B " + s)  # noqa: E731
    b = Conn(args.addr, args.port, blog, rtr=args.rtr)
    b.target(REGION, SEED_B, ACC_READ | ACC_WRITE)
    off = b.read_request(SINK_STAG, 0, 64, a_rkey, a_iova)
    verdict = expect_terminate(b, args.expect, off, blog)
    a.verify(REGION, SEED)
    a.close_clean()
    return verdict + "; A unharmed"


def global_conn(args, log):
    """A connection whose server-side PD has IB_PD_UNSAFE_GLOBAL_RKEY, with an
    unsealed target region; returns (conn, the target's DMA address, the
    global rkey, the target's length)."""
    c = Conn(args.addr, args.port, log, rtr=args.rtr, hello=HELLO_GLOBAL_RKEY)
    kind, a = c.request(K_TARGET, REGION, SEED, ACC_READ | ACC_WRITE, 0)
    if kind != K_TARGET_IS:
        raise SetupError("target request answered with type %d" % kind)
    kind, a = c.request(K_GLOBAL_KEY)
    if kind != K_TARGET_IS or a[1] == 0 or a[0] == 0:
        raise SetupError("no global rkey: type %d %r" % (kind, a))
    log("global rkey %#x; the target at DMA address %#x, %d octets" % (a[1], a[0], a[2]))
    return c, a[0], a[1], a[2]


# Addresses no kernel memory has: in the first page (never mapped), and
# non-canonical.
WILD_LOW = 0x10
WILD_NONCANONICAL = 0xDEAD000000000000


def case_global_rkey(args, log):
    """No hostility: under the server PD's global rkey, an RDMA Write into its
    target region by DMA address and a Read of it back (proves that the
    address and the key are right, so the wild cases test only the address)."""
    c, addr, gkey, n = global_conn(args, log)
    data = pattern_bytes(SEED_B, 0, 256)
    c.write(gkey, addr, data)
    c.verify(256, SEED_B)
    got = c.read(SINK_STAG, 0x1000, 256, gkey, addr)
    if got != data:
        raise Mismatch("Read Response data differ from what was written")
    c.close_clean()
    return "Write, Verify, Read of 256 octets under the global rkey, orderly close"


def case_global_write_wild(args, log):
    """RDMA Write of 64 octets under the global rkey at DMA address 0x10,
    where no kernel memory is."""
    c, addr, gkey, n = global_conn(args, log)
    return expect_terminate(c, args.expect, c.write(gkey, WILD_LOW, against(SEED, 64)), log)


def case_global_read_wild(args, log):
    """RDMA Read Request of 64 octets under the global rkey from a
    non-canonical DMA address."""
    c, addr, gkey, n = global_conn(args, log)
    off = c.read_request(SINK_STAG, 0, 64, gkey, WILD_NONCANONICAL)
    return expect_terminate(c, args.expect, off, log)


def kernel_addr(args, what):
    """The kernel address --what gave (as the shell read it from /proc)."""
    a = getattr(args, what.replace("-", "_"), None)
    if not a:
        raise SetupError("no --%s: the kernel address comes from /proc/kallsyms or "
                         "/proc/vmallocinfo, read as root" % what)
    return a


def linear_map_alias(image_addr):
    """The kernel's linear-map (direct-map) address of the kernel image's
    address image_addr, from /proc/kcore's program headers: the segment of the
    kernel text (_text to _end) gives its physical address, a segment of RAM
    the offset of the linear map (p_vaddr - p_paddr). Reads no kernel memory."""
    try:
        with open("/proc/kcore", "rb") as f:
            eh = f.read(64)
            phoff, = struct.unpack_from("<Q", eh, 32)
            phentsize, phnum = struct.unpack_from("<HH", eh, 54)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except OSError as e:
        raise SetupError("/proc/kcore: %s" % e) from e
    if eh[:4] != b"\x7fELF" or phentsize < 56:
        raise SetupError("/proc/kcore is not a 64-bit ELF core")
    text = linear = None
    for i in range(phnum):
        p_type, _, _, vaddr, paddr, _, memsz = struct.unpack_from(
            "<IIQQQQQ", table, i * phentsize)
        if p_type != 1 or paddr == 2**64 - 1:  # PT_LOAD with a physical address
            continue
        if vaddr <= image_addr < vaddr + memsz:
            text = image_addr - vaddr + paddr
        elif linear is None and vaddr < image_addr:
            linear = vaddr - paddr
    if text is None or linear is None:
        raise SetupError("/proc/kcore maps no kernel text around %#x or no RAM" % image_addr)
    return (linear + text) & (2**64 - 1)


def global_write(args, log, addr, what):
    """An RDMA Write of 64 octets under the global rkey at addr."""
    c, _, gkey, _ = global_conn(args, log)
    log("writing 64 octets to %s at %#x" % (what, addr))
    return expect_terminate(c, args.expect, c.write(gkey, addr, against(SEED, 64)), log)


def case_global_write_text(args, log):
    """RDMA Write of 64 octets under the global rkey to kernel text (_stext,
    its address in the kernel image's own mapping)."""
    return global_write(args, log, kernel_addr(args, "kernel-text"), "kernel text")


def case_global_write_rodata(args, log):
    """RDMA Write of 64 octets under the global rkey to kernel rodata
    (linux_banner, its address in the kernel image's own mapping)."""
    return global_write(args, log, kernel_addr(args, "kernel-rodata"), "kernel rodata")


def case_global_write_rodata_alias(args, log):
    """RDMA Write of 64 octets under the global rkey to kernel rodata
    (linux_banner) through its alias in the direct map: a reserved page,
    mapped read-only."""
    addr = linear_map_alias(kernel_addr(args, "kernel-rodata"))
    return global_write(args, log, addr, "kernel rodata's direct-map alias")


def case_global_write_vmalloc(args, log):
    """RDMA Write of 64 octets under the global rkey to a vmalloc area (the
    first page of one /proc/vmallocinfo lists)."""
    return global_write(args, log, kernel_addr(args, "vmalloc"), "a vmalloc area")


def case_global_read_rodata_alias(args, log):
    """RDMA Read Request of 64 octets under the global rkey from kernel rodata
    (linux_banner) through its alias in the direct map (a reserved page)."""
    addr = linear_map_alias(kernel_addr(args, "kernel-rodata"))
    c, _, gkey, _ = global_conn(args, log)
    log("reading 64 octets of kernel rodata's direct-map alias at %#x" % addr)
    return expect_terminate(c, args.expect, c.read_request(SINK_STAG, 0, 64, gkey, addr), log)


def case_global_read_huge(args, log):
    """RDMA Read Request of 0xffffffff octets (4 GiB) under the global rkey
    from the target region's DMA address: more than one access under the
    global rkey may cover, refused at once (the Terminate comes first, not
    after Read Responses)."""
    c, addr, gkey, _ = global_conn(args, log)
    off = c.read_request(SINK_STAG, 0, 0xFFFFFFFF, gkey, addr)
    return expect_terminate(c, args.expect, off, log)


def case_global_read_zero_page(args, log):
    """No hostility: an RDMA Read of 64 octets under the global rkey from the
    shared zero page (empty_zero_page, by its direct-map address), the one
    reserved page a peer may read (direct I/O of untouched memory carries it),
    reads back zeros; then an orderly close."""
    addr = linear_map_alias(kernel_addr(args, "kernel-zero-page"))
    c, _, gkey, _ = global_conn(args, log)
    got = c.read(SINK_STAG, 0x1000, 64, gkey, addr + 64)
    if got != bytes(64):
        raise Mismatch("the zero page reads back %s" % got.hex())
    log("read: 64 zero octets of the zero page at %#x" % (addr + 64))
    c.close_clean()
    return "Read of 64 octets of the zero page under the global rkey, orderly close"


@hostile
def case_read_beyond(c, iova, rkey, n):
    """RDMA Read Request of 64 octets at the last 32 of the region."""
    return c.read_request(SINK_STAG, 0, 64, rkey, iova + n - 32)


@hostile
def case_read_bad_key(c, iova, rkey, n):
    """RDMA Read Request under the region's STag with a wrong key octet."""
    return c.read_request(SINK_STAG, 0, 64, rkey ^ 0x5A, iova)


@hostile
@with_access(ACC_WRITE)
def case_read_write_only(c, iova, rkey, n):
    """RDMA Read Request of a region registered for remote write only."""
    return c.read_request(SINK_STAG, 0, 64, rkey, iova)


@hostile
def case_read_invalidated(c, iova, rkey, n):
    """RDMA Read Request under the key the server invalidated (LOCAL_INV,
    then REG_MR under the next key)."""
    _, new, _ = c.rotate()
    if new == rkey:
        raise SetupError("the rotated key is the old one: %#x" % new)
    return c.read_request(SINK_STAG, 0, 64, rkey, iova)


@hostile
def case_read_response_unsolicited(c, iova, rkey, n):
    """An RDMA Read Response although the server has no RDMA Read
    outstanding, aimed at the server's own region (its STag and base)."""
    return c.read_response(rkey, iova, against(SEED, 64))


def case_read_ird_overflow(args, log):
    """One RDMA Read Request more than the IRD the server's MPA Reply
    announced, all sent at once, each for a whole 1 MiB region. A Read
    Response counts as done once TCP has taken all of it, so the connection
    is narrow: the server can hand TCP some KiB before this peer reads, not
    a whole response (over loopback's 64 KiB MSS its send buffer outgrows
    1 MiB), and every Request is in before a slot frees. It also puts any
    Read Response data the server sends first ahead of the Terminate in a
    full window: the Terminate must still arrive, not be lost in a reset.
    Read Response segments ahead of the Terminate are skipped."""
    c = Conn(args.addr, args.port, log, rtr=args.rtr, narrow=True)
    size = 1 << 20
    iova, rkey, n = c.target(size, SEED, ACC_READ)
    count = c.peer_ird + 1
    if c.peer_ird >= IRD_ORD_MAX or count > 4096:
        raise SetupError("the server's IRD %d is not a number to exceed" % c.peer_ird)
    burst = []
    for _ in range(count):
        u = c.untagged(OP_READ_REQ, QN_READ) + read_req_hdr(SINK_STAG, 0, size, rkey, iova)
        burst.append(u)
    c.send_raw(b"".join(fpdu(u) for u in burst))
    log("sent %d Read Requests of %d octets at once (IRD %d)" % (count, size, c.peer_ird))
    try:
        segs, octets = c.skip_read_responses(SINK_STAG)
    except Closed as e:
        raise Mismatch("the connection was closed (%s) without a Terminate" % e.how) from e
    log("%d Read Response segments (%d octets) ahead of the Terminate" % (segs, octets))
    if octets >= count * size:
        raise Mismatch("every Read was answered: the IRD was not exceeded")
    return expect_terminate(c, args.expect, burst[-1], log)


def send_inv_case(args, log, stag_of):
    """A Send with Invalidate of 64 octets into a posted data receive on
    connection B, naming stag_of(A's rkey). The STag is checked before any
    payload is placed: the server's audit finds the receive untouched. A
    keeps its region, registered: an RDMA Read of it still works."""
    a = Conn(args.addr, args.port, lambda s: log("A " + s), rtr=args.rtr)
    a_iova, a_rkey, n = a.target(REGION, SEED, ACC_READ | ACC_WRITE)
    blog = lambda s: log("B " + s)  # noqa: E731
    b = Conn(args.addr, args.port, blog, rtr=args.rtr)
    b.target(REGION, SEED_B, ACC_READ | ACC_WRITE)
    b.expect_recv(RECV)
    stag = stag_of(a_rkey)
    off = b.send_inv(bytes((0xA5 ^ i) & 0xFF for i in range(64)), stag)
    blog("sent Send with Invalidate of STag %#x" % stag)
    verdict = expect_terminate(b, args.expect, off, blog)
    got = a.read(SINK_STAG, 0, 64, a_rkey, a_iova)
    if got != pattern_bytes(SEED, 0, 64):
        raise Mismatch("A's region reads back wrong after B's Send with Invalidate")
    a.log("read: A's STag %#x still valid" % a_rkey)
    a.close_clean()
    return verdict + "; A's STag still valid"


def case_send_inv_wrong_pd(args, log):
    """Send with Invalidate on connection B of connection A's STag (a valid
    STag of another protection domain)."""
    return send_inv_case(args, log, lambda k: k)


def case_send_inv_no_stag(args, log):
    """Send with Invalidate on connection B of an STag whose index names no
    region."""
    return send_inv_case(args, log, lambda k: 0xFFFFF000 | (k & 0xFF))


@hostile
def case_send_bad_crc(c, iova, rkey, n):
    """A Send of 64 octets into a 64-octet data receive, with a wrong CRC."""
    c.expect_recv(RECV)
    return c.send(pattern_bytes(SEED_B, 0, RECV), bad_crc=True)


@hostile
def case_send_too_long(c, iova, rkey, n):
    """A Send of 80 octets into a 64-octet data receive."""
    c.expect_recv(RECV)
    return c.send(pattern_bytes(SEED_B, 0, RECV + 16))


@hostile
def case_send_wrong_msn(c, iova, rkey, n):
    """A Send into a data receive with MSN 6 where 3 is next."""
    c.expect_recv(RECV)
    c.msn[QN_SEND] += 3
    return c.send(pattern_bytes(SEED_B, 0, RECV))


@hostile
def case_send_no_buffer(c, iova, rkey, n):
    """A Send when no receive is posted: the server does not post a new
    control receive after a message it cannot decode."""
    c.send(b"JUNK" + bytes(MSG_LEN - 4))
    kind, a = c.expect_send()
    if kind != K_STATUS or a[0] != 6:
        raise SetupError("junk answered with type %d %r, not BAD_REQUEST" % (kind, a))
    return c.send(msg(K_VERIFY, n, SEED))


@hostile
def case_ulpdu_short(c, iova, rkey, n):
    """An FPDU whose ULPDU_Length (10) is shorter than any DDP header;
    framing and CRC consistent with that length."""
    u = c.untagged(OP_SEND, QN_SEND)[:10]
    c.send_raw(fpdu(u))
    return u


@hostile
def case_read_request_short(c, iova, rkey, n):
    """A Read Request whose ULPDU_Length ends inside its RDMA Read header
    (20 of 28 octets)."""
    u = c.untagged(OP_READ_REQ, QN_READ) + read_req_hdr(SINK_STAG, 0, 64, rkey, iova)[:20]
    c.send_raw(fpdu(u))
    return u


@hostile
def case_read_request_long(c, iova, rkey, n):
    """A Read Request with 8 octets after its RDMA Read header."""
    u = c.untagged(OP_READ_REQ, QN_READ) + read_req_hdr(SINK_STAG, 0, 64, rkey, iova) + bytes(8)
    c.send_raw(fpdu(u))
    return u


def terminate_ulpdu(ctrl, offending):
    """The Terminate a device sends first (MSN 1) for offending (a ULPDU we
    sent): control octets ctrl, then, as RFC 5040 4.8 lays them out, the DDP
    Segment Length, the DDP header and, of a Read Request, its RDMA header."""
    hl = TAGGED_HDR_LEN if offending[0] & DDP_T else UNTAGGED_HDR_LEN
    if offending[1] & 0x0F == OP_READ_REQ:
        hl += READ_REQ_LEN
    return (untagged_hdr(OP_TERMINATE, QN_TERM, 1) + ctrl
            + struct.pack(">H", len(offending)) + offending[:hl])


# A Read Request's sink whose Tagged Offsets run past 2^64.
SINK_WRAP_TO, SINK_WRAP_SIZE = 0xFFFFFFFFFFFFFF00, 0x200


def case_read_sink_wrap(args, log):
    """RDMA Read Request of 0x200 octets of the region into a sink at Tagged
    Offset 0xffffffffffffff00: its Read Response could not be sent (the TO
    wraps). Expects exactly RDMAP's remote protection "TO wrap" (0/1/0x04)
    with M, D and R set and both headers copied, then the close."""
    c, iova, rkey, n = one(args, log)
    off = c.read_request(SINK_STAG, SINK_WRAP_TO, SINK_WRAP_SIZE, rkey, iova)
    exact = terminate_ulpdu(bytes([0x01, 0x04, 0xE0, 0x00]), off)
    log("expecting Terminate %s" % exact.hex())
    return expect_terminate(c, args.expect, off, log, exact=exact)


def expect_silent_close(conn, log):
    """After our Terminate: the device sends nothing and closes the stream."""
    t0 = time.monotonic()
    try:
        f = conn.recv_fpdu()
        raise Mismatch("the device answered our Terminate with %s" % f.describe())
    except Closed as e:
        if e.got:
            raise Mismatch("%d stray octets after our Terminate" % len(e.got)) from e
        how = e.how
    log("closed: %s, %.0f ms after our Terminate" % (how, (time.monotonic() - t0) * 1000))
    return "no Terminate back, then %s" % how


def silent(fn):
    """A case that ends its connection with a Terminate of ours."""

    def run(args, log):
        c, iova, rkey, length = one(args, log)
        fn(c, iova, rkey, length)
        return expect_silent_close(c, log)

    run.__doc__ = fn.__doc__
    return run


@silent
def case_peer_terminate(c, iova, rkey, n):
    """A Terminate as RFC 5040 4.8 lays it out: RDMAP 0/2/0xff, no headers."""
    u = c.untagged(OP_TERMINATE, QN_TERM) + bytes([0x02, 0xFF, 0x00, 0x00])
    c.send_raw(fpdu(u))
    return u


@silent
def case_peer_terminate_siw(c, iova, rkey, n):
    """A Terminate as the C siw builds it on little-endian hosts: RDMAP
    remote protection 0/1/0x02 with Layer and EType nibbles swapped, M, D
    and R in the low bits of the third octet, and only an untagged DDP header
    copied after the segment length (no Read Request header despite R)."""
    copied = untagged_hdr(OP_SEND, QN_SEND, 1, 0)
    body = bytes([0x10, 0x02, 0x07, 0x00]) + struct.pack(">H", 64) + copied
    u = c.untagged(OP_TERMINATE, QN_TERM) + body
    c.send_raw(fpdu(u))
    return u


@silent
def case_peer_terminate_short(c, iova, rkey, n):
    """A Terminate whose ULPDU ends after its DDP header: no control field."""
    u = c.untagged(OP_TERMINATE, QN_TERM)
    c.send_raw(fpdu(u))
    return u


CASES = {name[5:].replace("_", "-"): fn for name, fn in sorted(globals().items())
         if name.startswith("case_")}


# ---------------------------------------------------------------- self-test


def self_test():
    """Known answers: CRC32c check values and FPDUs from selftests/proto's
    vectors (which match RFC 5044 Figures 4-6 and the C siw)."""
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(bytes(32)) == 0x8A9136AA
    assert crc_wire(0x8A9136AA) == bytes.fromhex("aa36918a")
    vectors = [
        (tagged_hdr(OP_WRITE, 1, 0), "000e c140 00000001 0000000000000000 ebd34c5f"),
        (untagged_hdr(OP_SEND, 0, 1), "0012 4143 00000000 00000000 00000001 00000000 587be8c4"),
        (untagged_hdr(OP_READ_REQ, 1, 1) + read_req_hdr(0, 0, 0, 1, 0),
         "002e 4141 00000000 00000001 00000001 00000000 00000000 0000000000000000"
         " 00000000 00000001 0000000000000000 ba10e3c9"),
        (untagged_hdr(OP_SEND, 0, 1) + b"hello",
         "0017 4143 00000000 00000000 00000001 00000000 68656c6c6f 000000 b990b10c"),
    ]
    for ulpdu, want in vectors:
        got = fpdu(ulpdu).hex()
        assert got == want.replace(" ", ""), (got, want)
    assert parse_msg(msg(K_TARGET, 1, 2, 3, 4, 5)) == (K_TARGET, (1, 2, 3, 4, 5))
    print("self-test: ok")


# ---------------------------------------------------------------- main


def run_case(args, name, expect):
    """Runs one case, printing its log; returns its status."""
    fn = CASES.get(name)
    if fn is None:
        print("unknown case %r (--list)" % name, flush=True)
        return 2
    return run_fn(args, fn, expect)


def run_fn(args, fn, expect):
    """Runs the case function fn(args, log), printing its log; returns its status."""
    args.expect = expect
    start = time.monotonic()

    def log(s):
        print("%6.0f ms %s" % ((time.monotonic() - start) * 1000, s), flush=True)

    try:
        verdict = fn(args, log)
    except SetupError as e:
        log("setup: %s" % e)
        return 2
    except Mismatch as e:
        log("FAIL: %s" % e)
        return 1
    except OSError as e:
        log("FAIL: socket error: %s" % e)
        return 1
    except Exception:  # noqa: BLE001 - keep serving the next cases
        log("peer bug:\n" + traceback.format_exc())
        return 2
    finally:
        while OPEN:
            OPEN.pop().close()
    print("verdict: %s (%.0f ms)" % (verdict, (time.monotonic() - start) * 1000), flush=True)
    return 0


def serve(args):
    """Runs the cases named on stdin, one "CASE EXPECT" a line."""
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        try:
            expect = parse_expect(words[1] if len(words) > 1 else "any")
        except (argparse.ArgumentTypeError, ValueError) as e:
            print("bad expectation: %s" % e)
            st = 2
        else:
            st = run_case(args, words[0], expect)
        print("done %d" % st, flush=True)
    return 0


# ---------------------------------------------------------------- responder


def respond(args, log):
    """--respond ird|rtr: listen on --addr:--port, answer one MPA Request with
    an RFC 6581 enhanced Reply the initiator cannot comply with, and check what
    the initiator does then (RFC 6581 section 8): one Terminate, its first FPDU,
    with the Layer/EType/Code of --expect, then the end of the connection.
      ird: the Reply's ORD is one more than the Request's IRD (2/0/0x06);
      rtr: peer-to-peer mode with no RTR type offered (2/0/0x07).
    The Reply has C=1, so the Terminate carries a CRC. Prints "listening"
    once connections are taken; the status is that of a case."""
    ls = socket.socket()
    OPEN.append(ls)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((args.addr, args.port))
    ls.listen(1)
    ls.settimeout(120)
    print("listening", flush=True)
    try:
        sock, _ = ls.accept()
    except socket.timeout as e:
        raise SetupError("no connection within 120 s") from e
    conn = Conn.accepted(sock, log)
    flags, rev, pd = conn.recv_mpa_frame(KEY_REQ, "Request")
    if rev != 2 or not flags & MPA_S or len(pd) < 4:
        raise SetupError("not an enhanced revision 2 Request: flags %#x rev %d" % (flags, rev))
    w0, w1 = struct.unpack(">HH", pd[:4])
    ird, ord_ = w0 & IRD_ORD_MAX, w1 & IRD_ORD_MAX
    p2p = bool(w0 & 0x8000)
    log("mpa: %s: request flags %#x ird %d ord %d p2p %d rtr bits %#x" % (
        conn.name, flags, ird, ord_, p2p, (w0 & 0x4000) | (w1 & 0xC000)))
    if args.respond == "ird":
        if ird >= IRD_ORD_MAX - 1:
            raise SetupError("the Request's IRD %#x leaves no larger ORD" % ird)
        # Our IRD is their ORD and we accept their RTR types; only our ORD is too deep.
        r0, r1 = (w0 & 0xC000) | ord_, (w1 & 0xC000) | (ird + 1)
    else:
        if not p2p:
            raise SetupError("the Request does not ask for peer-to-peer mode")
        r0, r1 = 0x8000 | ord_, ird
    rpd = struct.pack(">HH", r0, r1)
    log("mpa: reply ird %d ord %d p2p %d rtr bits %#x" % (
        r0 & IRD_ORD_MAX, r1 & IRD_ORD_MAX, bool(r0 & 0x8000), (r0 & 0x4000) | (r1 & 0xC000)))
    conn.send_raw(KEY_REP + bytes([MPA_C | MPA_S, 2]) + struct.pack(">H", len(rpd)) + rpd)
    return expect_terminate(conn, args.expect, b"", log)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("case", nargs="?", help="what to send (--list)")
    ap.add_argument("--addr", default="198.18.0.1")
    ap.add_argument("--port", type=int, default=20887)
    ap.add_argument("--expect", type=parse_expect, default=None,
                    help="LAYER/ETYPE/CODE of the Terminate, or any")
    ap.add_argument("--rtr", choices=("write", "send", "none"), default="write",
                    help="RFC 6581 peer-to-peer RTR to send (none: no p2p)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--serve", action="store_true", help="run the cases named on stdin")
    ap.add_argument("--respond", choices=("ird", "rtr"),
                    help="be the responder: a Reply the initiator must Terminate (see respond)")
    addr = lambda s: int(s, 0)  # noqa: E731
    ap.add_argument("--kernel-text", type=addr, help="a kernel text address (_stext)")
    ap.add_argument("--kernel-rodata", type=addr, help="a kernel rodata address (linux_banner)")
    ap.add_argument("--kernel-zero-page", type=addr, help="empty_zero_page's address")
    ap.add_argument("--vmalloc", type=addr, help="an address in a vmalloc area")
    args = ap.parse_args()
    if args.self_test:
        self_test()
        return 0
    if args.serve:
        return serve(args)
    if args.respond:
        return run_fn(args, respond, args.expect)
    if args.list or not args.case:
        for name, fn in CASES.items():
            print("%-20s %s" % (name, " ".join((fn.__doc__ or "").split())))
        return 0 if args.list else 2
    return run_case(args, args.case, args.expect)


if __name__ == "__main__":
    sys.exit(main())
