"""Prints what a browser screenshot shows, for tests: "WIDTH HEIGHT COLOURS INKED" where COLOURS is
the number of distinct pixel colours and INKED the share of pixels that are not the background
(the top-left pixel's colour). Decodes 8-bit RGB/RGBA PNGs with the standard library only."""
import struct
import sys
import zlib


def rows(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise SystemExit(f"{path}: not a PNG")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour_type, _, _, interlace = header
    if depth != 8 or colour_type not in (2, 6) or interlace:
        raise SystemExit(f"{path}: only 8-bit non-interlaced RGB/RGBA is decoded here")
    channels = 3 if colour_type == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    previous = bytearray(stride)
    out = []
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = previous[i]
            c = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        out.append([bytes(line[x:x + 3]) for x in range(0, stride, channels)])
        previous = line
    return width, height, out


width, height, pixels = rows(sys.argv[1])
background = pixels[0][0]
colours = set()
inked = 0
for row in pixels:
    colours.update(row)
    inked += sum(1 for p in row if p != background)
print(width, height, len(colours), f"{inked / (width * height):.4f}")
