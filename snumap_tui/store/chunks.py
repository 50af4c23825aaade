"""The container layer of a recording: file preamble, self-delimiting chunks, scanning and resync.

Layout (docs/format.md is the normative text; keep the two in step):

    file     = preamble chunk*
    preamble = "\\x89SNUMAP\\n" (8) | version u16 | flags u16 | crc32(previous 12 bytes) u32
    chunk    = chunk header (44 bytes) | payload (payload_len bytes)
    header   = magic "\\xc5SNC" | kind u8 | codec u8 | reserved u16 | payload_len u32 |
               raw_len u32 | count u32 | t_min u64 | t_max u64 | payload_crc u32 |
               header_crc u32 (crc32 of the 40 bytes before it)

Every chunk carries its own length and two CRC32s, so a reader can (a) walk the file reading only
44-byte headers (the time index without decompressing anything), (b) tell a damaged payload from a
damaged header, and (c) after garbage, find the next chunk by searching for the magic and accepting
only a header whose CRC matches (a false match needs a 2^-32 coincidence).
"""

from __future__ import annotations

import mmap
import struct
import zlib
from dataclasses import dataclass

import zstandard

from snumap_tui.errors import SnumapError
from snumap_tui.store import kinds

FILE_MAGIC = b"\x89SNUMAP\n"
PREAMBLE = struct.Struct("<8sHHI")
PREAMBLE_SIZE = PREAMBLE.size  # 16

CHUNK_MAGIC = b"\xc5SNC"
CHUNK_HEADER = struct.Struct("<4sBBHIIIQQII")
CHUNK_HEADER_SIZE = CHUNK_HEADER.size  # 44
MAX_PAYLOAD = 1 << 30  # a sanity bound: a writer never makes a chunk this big

# Chunk kinds (the u8 "kind" field): numbers, names and payload schemas are registered in
# store/kinds.py, the one table to extend; the constants are repeated here for the readers
# and writers that know them as ``chunks.K_*``.
K_HEADER, K_SAMPLES, K_EVENTS, K_TASKS = (kinds.K_HEADER, kinds.K_SAMPLES, kinds.K_EVENTS,
                                          kinds.K_TASKS)
K_LOST, K_MARKERS, K_INDEX, K_TRAILER = kinds.K_LOST, kinds.K_MARKERS, kinds.K_INDEX, \
    kinds.K_TRAILER
K_SAMPLE_TIMES, K_INFO, K_NODE, K_NODE_SAMPLES = (kinds.K_SAMPLE_TIMES, kinds.K_INFO,
                                                  kinds.K_NODE, kinds.K_NODE_SAMPLES)
K_HEADER_COPY = kinds.K_HEADER_COPY
KIND_NAMES = kinds.KIND_NAMES
MAX_RAW_LEN = kinds.MAX_RAW_LEN
# A recording's span, its *duration* everywhere (record's summary, report, replay): from the
# earliest to the latest time of these chunks' contents (docs/format.md, "Duration").
SPAN_KINDS = (K_EVENTS, K_SAMPLES, K_MARKERS, K_NODE_SAMPLES)
K_REGIONS = kinds.K_REGIONS
K_PROCESS_MEMORY = kinds.K_PROCESS_MEMORY

# Payload codecs (the u8 "codec" field).
CODEC_NONE, CODEC_ZSTD = 0, 1

TRAILER = struct.Struct("<QQQ")  # index chunk offset, number of chunks before it, events total
TRAILER_CHUNK_SIZE = CHUNK_HEADER_SIZE + TRAILER.size

# What a recording is read from: the file's read-only mmap, or bytes / a view of them (tests,
# payloads). Every reader below only slices, ``len``s and ``struct.unpack_from``s it.
Buffer = bytes | memoryview | mmap.mmap


def crc32(data: bytes | memoryview) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def pack_preamble(version: int) -> bytes:
    head = PREAMBLE.pack(FILE_MAGIC, version, 0, 0)[:12]
    return head + struct.pack("<I", crc32(head))


def parse_preamble(data: Buffer, size: int) -> int:
    """The format version of a file whose first bytes are ``data`` (``size`` = file size)."""
    if size == 0:
        raise SnumapError("empty file (nothing was recorded)")
    if size < PREAMBLE_SIZE or bytes(data[:8]) != FILE_MAGIC:
        raise SnumapError("not a snumap recording (no snumap file signature)")
    _magic, version, _flags, crc = PREAMBLE.unpack_from(data, 0)
    if crc != crc32(data[:12]):
        raise SnumapError("not a readable snumap recording (its file header is damaged)")
    return int(version)


@dataclass(frozen=True)
class ChunkHeader:
    offset: int          # of the chunk header in the file
    kind: int
    codec: int
    payload_len: int
    raw_len: int
    count: int
    t_min: int
    t_max: int
    payload_crc: int

    @property
    def end(self) -> int:
        return self.offset + CHUNK_HEADER_SIZE + self.payload_len

    @property
    def name(self) -> str:
        return KIND_NAMES.get(self.kind, f"kind {self.kind}")


def pack_chunk(kind: int, payload: bytes, *, count: int = 0, t_min: int = 0, t_max: int = 0,
               compress: zstandard.ZstdCompressor | None = None) -> bytes:
    """One complete chunk (header + payload), compressed when that makes it smaller."""
    raw_len = len(payload)
    codec = CODEC_NONE
    if compress is not None and raw_len > 64:
        packed = compress.compress(payload)
        if len(packed) < raw_len:
            payload, codec = packed, CODEC_ZSTD
    return _chunk_header(kind, codec, len(payload), raw_len, count, t_min, t_max,
                         crc32(payload)) + payload


def reheaded(h: ChunkHeader, t_min: int, t_max: int, kind: int | None = None) -> bytes:
    """The 44-byte header of chunk ``h`` with new times (payload and its CRC unchanged): how
    a merge copies a chunk onto another time base without touching its payload."""
    return _chunk_header(h.kind if kind is None else kind, h.codec, h.payload_len, h.raw_len,
                         h.count, t_min, t_max, h.payload_crc)


def _chunk_header(kind: int, codec: int, payload_len: int, raw_len: int, count: int,
                  t_min: int, t_max: int, payload_crc: int) -> bytes:
    """A 44-byte chunk header, its own CRC last."""
    head = CHUNK_HEADER.pack(CHUNK_MAGIC, kind, codec, 0, payload_len, raw_len, count,
                             t_min & 0xFFFFFFFFFFFFFFFF, t_max & 0xFFFFFFFFFFFFFFFF,
                             payload_crc, 0)[:40]
    return head + struct.pack("<I", crc32(head))


def parse_chunk_header(data: Buffer, offset: int) -> ChunkHeader | None:
    """The chunk header at ``offset`` of ``data`` if it is a valid one, else None."""
    if offset + CHUNK_HEADER_SIZE > len(data) or bytes(data[offset:offset + 4]) != CHUNK_MAGIC:
        return None
    (_m, kind, codec, _r, plen, raw_len, count, t_min, t_max, pcrc,
     hcrc) = CHUNK_HEADER.unpack_from(data, offset)
    if hcrc != crc32(data[offset:offset + 40]) or plen > MAX_PAYLOAD:
        return None
    return ChunkHeader(offset, kind, codec, plen, raw_len, count, t_min, t_max, pcrc)


class PayloadError(Exception):
    """A chunk's payload failed its CRC or would not decompress."""


def payload_of(data: Buffer, h: ChunkHeader,
               dctx: zstandard.ZstdDecompressor) -> bytes | memoryview:
    """The checked, decompressed payload of chunk ``h``."""
    start = h.offset + CHUNK_HEADER_SIZE
    stored = memoryview(data)[start:start + h.payload_len]
    if len(stored) != h.payload_len:
        raise PayloadError("truncated")
    if crc32(stored) != h.payload_crc:
        raise PayloadError("checksum mismatch")
    if h.raw_len > MAX_RAW_LEN:
        raise PayloadError(f"declares {h.raw_len} bytes decompressed, more than the "
                           f"{MAX_RAW_LEN} a chunk may hold")
    bad_count = kinds.check_count(h.kind, h.count, h.raw_len)
    if bad_count:
        raise PayloadError(bad_count)
    if h.codec == CODEC_NONE:
        if h.raw_len != h.payload_len:
            raise PayloadError(f"raw_len {h.raw_len} differs from its {h.payload_len} bytes")
        return stored
    if h.codec != CODEC_ZSTD:
        raise PayloadError(f"unknown codec {h.codec}")
    return _inflate(stored, h.raw_len, dctx)


def _inflate(stored: memoryview, raw_len: int, dctx: zstandard.ZstdDecompressor) -> bytes:
    """Decompress at most ``raw_len`` bytes: a frame that declares or holds more is refused,
    never inflated to what it claims (a 1 GiB frame of zeros is a few kB on disk). A frame
    that declares its size (the writer's do) must declare ``raw_len`` and is decompressed in
    one call into that much memory; one that does not is streamed into a buffer of
    ``raw_len`` + 1 bytes, and one byte too many is the end of it."""
    try:
        declared = zstandard.frame_content_size(stored)
    except zstandard.ZstdError as e:
        raise PayloadError(f"zstd: {e}") from None
    if declared >= 0 and declared != raw_len:
        raise PayloadError(f"zstd frame declares {declared} bytes, the chunk {raw_len}")
    try:
        if declared >= 0:
            out = dctx.decompress(stored, max_output_size=raw_len)
        else:
            buf = bytearray(raw_len + 1)
            n = 0
            with dctx.stream_reader(stored, read_across_frames=True) as r:
                while n <= raw_len:
                    got = r.readinto(memoryview(buf)[n:])
                    if not got:
                        break
                    n += got
            if n > raw_len:
                raise PayloadError(f"decompressed size mismatch (over {raw_len})")
            out = bytes(memoryview(buf)[:n])
    except zstandard.ZstdError as e:
        raise PayloadError(f"zstd: {e}") from None
    if len(out) != raw_len:
        raise PayloadError(f"decompressed size mismatch ({len(out)} for {raw_len})")
    return out


@dataclass
class ScanResult:
    chunks: list[ChunkHeader]
    damaged: list[str]
    second_at: int | None = None   # where a second recording's signature starts, if any


def next_preamble(data: Buffer, start: int = PREAMBLE_SIZE) -> int | None:
    """Offset of the first valid file preamble at or after ``start``: a second recording
    appended to this one (``cat a.rec b.rec``), or None."""
    at = _find(data, FILE_MAGIC, start)
    while at >= 0:
        if at + PREAMBLE_SIZE <= len(data) and \
                PREAMBLE.unpack_from(data, at)[3] == crc32(data[at:at + 12]):
            return at
        at = _find(data, FILE_MAGIC, at + 1)
    return None


def second_recording_note(at: int) -> str:
    return (f"a second recording starts at byte {at} (files joined, e.g. with cat): only the "
            f"first is read; `tail -c +{at + 1}` extracts the second")


def scan(data: Buffer, start: int = PREAMBLE_SIZE) -> ScanResult:
    """Walk every chunk header from ``start`` to the end, resynchronising after damage.

    Reads headers only; payload CRCs are checked when a payload is used (or by
    ``Recording.verify``), so building the index of a large file touches one page per chunk.
    A second file signature ends the walk: what follows it is another recording, never
    merged into this one.
    """
    second = next_preamble(data, start)
    size = len(data) if second is None else second
    mv = memoryview(data)[:size]
    chunks: list[ChunkHeader] = []
    damaged: list[str] = []
    pos = start
    while pos < size:
        h = parse_chunk_header(mv, pos)
        if h is not None and h.end <= size:
            chunks.append(h)
            pos = h.end
            continue
        if h is not None:  # a valid header whose payload runs past the end: the crash tail
            damaged.append(f"truncated {h.name} chunk at byte {pos}: "
                           f"{size - pos} of {h.end - pos} bytes present (recording cut off)")
            pos = h.end
            break
        nxt = _find(data, CHUNK_MAGIC, pos + 1)
        # Only resync on a magic whose header checks out.
        while 0 <= nxt < size and parse_chunk_header(mv, nxt) is None:
            nxt = _find(data, CHUNK_MAGIC, nxt + 1)
        end = size if nxt < 0 or nxt >= size else nxt
        what = "unreadable bytes" if end < size else "unreadable bytes at the end"
        if end > pos:
            damaged.append(f"{what} {pos}-{end} ({end - pos} bytes) skipped")
        pos = end
    if second is not None:
        damaged.append(second_recording_note(second))
    return ScanResult(chunks, damaged, second)


def _find(data: Buffer, needle: bytes, start: int) -> int:
    """``data.find`` for bytes and mmap alike (a memoryview has no find: copy, rare path)."""
    finder = getattr(data, "find", None)
    if finder is not None:
        return int(finder(needle, start))
    return bytes(data).find(needle, start)
