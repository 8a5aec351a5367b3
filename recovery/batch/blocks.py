"""numpy helpers of the block decoders of plainly valid commitlog records that ``dump``
(the CLI's JSON-lines renderer) and ``export`` (the CLI's Arrow renderer, Arrow
batches) render: byte rows, distinct rows, the V1 lengths rule, body CRCs, host keys. Only numpy: ``dump`` must not need pyarrow. (Formerly
``rmqtool.recovery.batch.blocks``, which still re-exports them.)"""

from __future__ import annotations

import numpy as np

from .. import ccore


def rows(A: np.ndarray, start: np.ndarray, width: int) -> np.ndarray:
    """A copy of the ``width`` bytes at each of ``start`` (one row each; NUL past the end
    of ``A``)."""
    if width <= 0:
        return np.zeros((len(start), 0), dtype=np.uint8)
    lim = len(A) - width
    if lim < 0:
        out: np.ndarray = np.zeros((len(start), width), dtype=np.uint8)
        for i, s in enumerate(start.tolist()):
            out[i, : len(A) - s] = A[s:]
        return out
    out = np.lib.stride_tricks.sliding_window_view(A, width)[np.minimum(start, lim)]
    if len(start) and int(start.max()) > lim:  # rows within ``width`` bytes of the end
        for i in np.flatnonzero(start > lim).tolist():
            s = int(start[i])
            out[i] = 0
            out[i, : len(A) - s] = A[s:]
    return out


def gather(A: np.ndarray, start: np.ndarray, length: np.ndarray, width: int) -> np.ndarray:
    """Rows of ``width`` bytes from ``start``, NUL from ``length`` on."""
    m = rows(A, start, width)
    if len(length) and int(length.min()) < width:
        m[np.arange(width)[None, :] >= length[:, None]] = 0
    return m


def distinct(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int32 inverse, first index of each distinct value) of a 1-D array, in order of
    first appearance; a loop of comparisons for the few distinct values these paths meet,
    np.unique beyond 16."""
    n = len(key)
    inv = np.full(n, -1, dtype=np.int32)
    firsts: list[int] = []
    todo = 0
    for d in range(16):
        firsts.append(todo)
        inv[key == key[todo]] = d
        rest = np.flatnonzero(inv < 0)
        if not len(rest):
            return inv, np.array(firsts, dtype=np.intp)
        todo = int(rest[0])
    _u, first, uinv = np.unique(key, return_index=True, return_inverse=True)
    return uinv.reshape(-1).astype(np.int32), first


def row_groups(mat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(inverse, representative row indices) of the distinct rows of a uint8 matrix: rows
    hashed on 8-byte words, then every row compared with its group's representative (a
    hash collision falls back to ``np.unique`` on the rows)."""
    n = len(mat)
    if n == 0 or (mat == mat[0]).all():
        return np.zeros(n, dtype=np.int32), np.zeros(min(n, 1), dtype=np.intp)
    w = mat.shape[1]
    words = np.zeros((n, -(-w // 8) * 8), dtype=np.uint8)
    words[:, :w] = mat
    u = words.view(np.uint64)  # each row as whole 8-byte words, mixed into one key
    key = u[:, 0] * np.uint64(0x9E3779B97F4A7C15)
    for j in range(1, u.shape[1]):
        key = (key ^ (key >> np.uint64(29))) + u[:, j] * np.uint64(0xC2B2AE3D27D4EB4F)
    inv, first = distinct(key)
    if (mat == mat[first[inv]]).all():
        return inv, first
    _u, first, inv = np.unique(np.ascontiguousarray(mat), axis=0, return_index=True, return_inverse=True)  # a collision
    return inv.reshape(-1).astype(np.int32), first


def v1_lengths(
    A: np.ndarray, P: np.ndarray, total: np.ndarray, sys_flag: np.ndarray, body_length: np.ndarray, header: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The lengths rule of a plain V1 record at each of ``P`` (``header`` = the IPv4 V1
    header size): IPv4 hosts, BODYLENGTH >= 0, a one-byte topic length <= 127, a two-byte
    properties length in (0, 0x7FFF], and all of them adding up to TOTALSIZE. Returns
    (ok, topic length position, topic length, properties length position, properties
    length); values read for records that fail are garbage."""
    last = len(A) - 1
    ok = ((sys_flag & 0x30) == 0) & (body_length >= 0) & (header + body_length + 3 <= total)
    tpos = P + header + np.maximum(body_length, 0)
    tl = A[np.minimum(tpos, last)].astype(np.int64)
    q = tpos + 1 + tl
    ok &= (tl <= 127) & (q + 2 <= P + total)
    pl = (A[np.minimum(q, last)].astype(np.int64) << 8) | A[np.minimum(q + 1, last)]
    ok &= (pl > 0) & (pl <= 0x7FFF) & (header + body_length + 3 + tl + pl == total)
    return ok, tpos, tl, q, pl


def body_crcs_match(
    mv: memoryview, P: np.ndarray, body_length: np.ndarray, body_crc: np.ndarray, header: int
) -> np.ndarray:
    """Whether each record's body (at ``P + header``) has its stored BODYCRC (masked CRC-32,
    STORE_FORMAT §5; an empty body's stored value is not checked):
    :func:`recovery.ccore.crc32_spans`, one pass without Python per body."""
    bs = P + header
    crcs = ccore.crc32_spans(mv, bs, bs + body_length)
    out: np.ndarray = (body_length == 0) | ((crcs & 0x7FFFFFFF) == body_crc)
    return out


def host_keys(address: np.ndarray, port: np.ndarray) -> np.ndarray:
    """One uint64 per IPv4 host: the 4 address bytes (an (n, 4) uint8 array, or n 4-byte
    strings) in the high half, the port's 32 bits in the low half (:func:`host_of_key`)."""
    a = np.frombuffer(np.ascontiguousarray(address).tobytes(), dtype=">u4").astype(np.uint64)
    return (a << np.uint64(32)) | (port.astype(np.int64) & 0xFFFFFFFF).astype(np.uint64)


def host_of_key(key: int) -> tuple[bytes, int]:
    """(address bytes, signed port) of a :func:`host_keys` value."""
    port = key & 0xFFFFFFFF
    return (key >> 32).to_bytes(4, "big"), port - (1 << 32) if port >= 1 << 31 else port
