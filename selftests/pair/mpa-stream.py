#!/usr/bin/python3
"""Checks the MPA framing and CRC32c of every FPDU in a capture, per TCP stream.

Used by interop-siw.host beside tshark. tshark dissects frame by frame and
its reassembly can go astray around retransmitted or out-of-order segments;
this rebuilds each direction of each TCP connection by sequence number from
the first copy of every byte, then walks the MPA Request or Reply and the
FPDUs behind it (RFC 5044 section 7 and 8, Markers off) and checks every
CRC32c with an independent implementation (crcmod, a C extension).

It also compares every later copy of a byte (a TCP retransmission) with the
first: a sender that lets a buffer be reused while TCP still holds its pages
resends other bytes than it first sent.

Input (stdin): tshark fields, one data segment per line,
"frame|tcp.stream|ip.src|tcp.seq|tcp.len|tcp.payload", with relative
sequence numbers. Output, one record per line:
  fpdus SRC COUNT GOOD BAD            per sender
  bad FRAME SRC LEN OPCODE CRC WANT   an FPDU with a bad CRC (frame: its first byte)
  nonzero FRAME SRC                   without CRC, an FPDU whose CRC field is not 0
  resent FRAME SRC BYTES EARLIER OPS  a resent copy that differs; OPS: RDMAP opcodes
                                      of the FPDUs holding the differing bytes
  hole SRC STREAM OFFSET              bytes missing from the capture: parsing stops
  markers STREAM                      Markers negotiated: the stream is not checked
  badframe FRAME SRC WHAT             framing that is not MPA
"""

import bisect
import sys

import crcmod.predefined

crc32c = crcmod.predefined.mkPredefinedCrcFun("crc-32c")
KEY_REQ = b"MPA ID Req Frame"
KEY_REP = b"MPA ID Rep Frame"
FLAG_M, FLAG_C, FLAG_R = 0x80, 0x40, 0x20
RDMAP_NAMES = {0: "Write", 1: "ReadRequest", 2: "ReadResponse", 3: "Send",
               4: "SendInvalidate", 5: "SendSE", 6: "SendSEInvalidate",
               7: "Terminate"}


class Direction:
    """One direction of a TCP stream: the first copy of every byte."""

    def __init__(self, src):
        self.src = src
        self.pieces = []  # disjoint (start, frame, data) of first copies, sorted
        self.resent = []  # (frame, differing offsets, earlier frame)
        self.built = None  # what stream() returns, once all pieces are in

    def add(self, frame, start, data):
        end = start + len(data)
        pos, new, differ, earlier = start, [], [], None
        k = max(bisect.bisect_right(self.pieces, (start, float("inf"))) - 1, 0)
        while k < len(self.pieces) and self.pieces[k][0] < end:
            s, fr, d = self.pieces[k]
            k += 1
            if s + len(d) <= pos:
                continue
            if s > pos:
                new.append((pos, data[pos - start:s - start]))
            hi = min(s + len(d), end)
            lo = max(s, pos)
            if d[lo - s:hi - s] != data[lo - start:hi - start]:
                differ += [o for o in range(lo, hi) if d[o - s] != data[o - start]]
                earlier = fr
            pos = hi
        if pos < end:
            new.append((pos, data[pos - start:]))
        if differ:
            self.resent.append((frame, differ, earlier))
        for p, piece in new:
            self.pieces.insert(bisect.bisect_left(self.pieces, (p,)), (p, frame, piece))

    def stream(self):
        """The contiguous bytes from the lowest offset, the frame of each
        byte's first copy (as run starts), and the offset of a hole or None.
        Built once, after the last `add`."""
        if self.built is None:
            out, starts, frames, hole = bytearray(), [], [], None
            base = self.pieces[0][0] if self.pieces else 0
            for s, fr, d in self.pieces:
                if s > base + len(out):
                    hole = len(out)
                    break
                starts.append(len(out))
                frames.append(fr)
                out += d
            self.built = (bytes(out), starts, frames, hole)
        return self.built


def frame_at(starts, frames, off):
    """The frame that carried stream offset `off`."""
    return frames[bisect.bisect_right(starts, off) - 1]


def mpa_start(d, out):
    """The offset of the first FPDU: after the MPA Request or Reply that must
    open the direction. None (and a badframe record if there is data) if it
    does not."""
    data, _, frames, _ = d.stream()
    if data[:16] in (KEY_REQ, KEY_REP):
        return 20 + int.from_bytes(data[18:20], "big") if len(data) >= 20 else None
    if data:
        out.append("badframe %d %s no MPA Request or Reply first" % (frames[0], d.src))
    return None


def parse(d, stream_id, crc, out):
    """Walks one direction's FPDUs; returns ([(start, end, opcode)], count,
    good CRCs)."""
    data, starts, frames, hole = d.stream()
    if hole is not None:
        out.append("hole %s %s %d" % (d.src, stream_id, hole))
    fpdus, count, good = [], 0, 0
    pos = mpa_start(d, out)
    if pos is None:
        return fpdus, count, good
    while pos + 2 <= len(data):
        ulpdu = int.from_bytes(data[pos:pos + 2], "big")
        body = 2 + ulpdu + (-(2 + ulpdu) % 4)
        end = pos + body + 4
        if end > len(data):
            break
        opcode = data[pos + 3] & 0x0F if ulpdu >= 2 else -1
        count += 1
        field = int.from_bytes(data[pos + body:end], "little")
        fr = frame_at(starts, frames, pos)
        if crc:
            want = crc32c(data[pos:pos + body])
            if field == want:
                good += 1
            else:
                out.append("bad %d %s %d %s 0x%08x 0x%08x" % (
                    fr, d.src, ulpdu, RDMAP_NAMES.get(opcode, opcode), field, want))
        elif field == 0:
            good += 1
        else:
            out.append("nonzero %d %s" % (fr, d.src))
        fpdus.append((pos, end, opcode))
        pos = end
    return fpdus, count, good


def main():
    conns = {}  # stream -> {src: Direction}
    for line in sys.stdin:
        f = line.rstrip("\n").split("|")
        if len(f) < 6 or not f[3] or not f[4] or f[4] == "0" or not f[5]:
            continue
        dirs = conns.setdefault(f[1], {})
        d = dirs.setdefault(f[2], Direction(f[2]))
        d.add(int(f[0]), int(f[3]), bytes.fromhex(f[5].replace(":", "")))
    out, totals = [], {}
    for stream_id, dirs in conns.items():
        # CRC and Markers are what the Reply grants (RFC 5044 section 7.1).
        crc = markers = None
        for d in dirs.values():
            data, _, _, _ = d.stream()
            if data[:16] == KEY_REP and len(data) >= 20:
                if data[16] & FLAG_R:
                    crc = markers = None
                    break
                crc, markers = bool(data[16] & FLAG_C), bool(data[16] & FLAG_M)
        if markers:
            out.append("markers %s" % stream_id)
            continue
        for d in dirs.values():
            if crc is None:
                # No Reply granted anything (rejected or unanswered): only the
                # framing's start is checked.
                mpa_start(d, out)
                fpdus, c, g = [], 0, 0
            else:
                fpdus, c, g = parse(d, stream_id, crc, out)
            t = totals.setdefault(d.src, [0, 0])
            t[0] += c
            t[1] += g
            for frame, offs, earlier in d.resent:
                base = d.pieces[0][0]
                ops = set()
                for o in offs:
                    k = bisect.bisect_right(fpdus, (o - base, float("inf"))) - 1
                    if k >= 0 and fpdus[k][0] <= o - base < fpdus[k][1]:
                        ops.add(RDMAP_NAMES.get(fpdus[k][2], str(fpdus[k][2])))
                    else:
                        ops.add("MPA")
                out.append("resent %d %s %d %d %s" % (frame, d.src, len(offs), earlier,
                                                      ",".join(sorted(ops))))
    for src, (c, g) in sorted(totals.items()):
        print("fpdus %s %d %d %d" % (src, c, g, c - g))
    for line in out:
        print(line)


if __name__ == "__main__":
    main()
