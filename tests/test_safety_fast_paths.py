"""The fast paths of recovery.safety: writers hashed on the way (holes for write_zeros,
read-back when the writer seeks), backups by hard link, and restore from such a backup."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from rmqtool.recovery.safety import StoreTransaction, load_manifest, restore, verify_backup


def _store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    (root / "index").mkdir(parents=True)
    (root / "commitlog").mkdir()
    (root / "checkpoint").write_bytes(bytes(4096))
    return root


def _seq_writer(parts: list[Any]) -> Any:
    def write(f: Any) -> None:
        for p in parts:
            if isinstance(p, int):
                zeros = getattr(f, "write_zeros", None)
                if zeros is not None:
                    zeros(p)
                else:
                    f.write(bytes(p))
            else:
                f.write(p)

    return write


@pytest.mark.parametrize(
    "parts",
    [
        [b"head", 1 << 20, b"tail"],  # a hole in the middle
        [b"x" * 100_000, 3 * (1 << 23) + 5],  # ends in a hole longer than the hash chunk
        [bytearray(b"abc") * 50_000, memoryview(b"defg" * 40_000), 7],
        [],
    ],
)
def test_sequential_writer_content_and_sha_match(tmp_path: Path, parts: list[Any]) -> None:
    root = _store(tmp_path)
    want = b"".join(bytes(p) if isinstance(p, int) else bytes(p) for p in parts)
    with StoreTransaction(root, backup_dir=tmp_path / "bk") as tx:
        tx.create_file("index/new", _seq_writer(parts))
        tx.commit()
    got = (root / "index" / "new").read_bytes()
    assert got == want
    m = load_manifest(tmp_path / "bk")
    # a zero tail of 1 MiB or more written last is described, not hashed: <sha256 of the
    # rest>+<N>z; anything else is the sha256 of the whole content
    tail = parts[-1] if parts and isinstance(parts[-1], int) and parts[-1] >= 1 << 20 else 0
    sha = hashlib.sha256(want[: len(want) - tail]).hexdigest() + (f"+{tail}z" if tail else "")
    assert m["entries"][0]["result"] == {"size": len(want), "sha256": sha}


def test_writer_that_seeks_after_a_hole_is_hashed_from_disk(tmp_path: Path) -> None:
    root = _store(tmp_path)

    def write(f: Any) -> None:
        f.write(b"A" * 10)
        f.write_zeros(70_000)
        f.seek(2)  # patch the header afterwards
        f.write(b"ZZ")

    with StoreTransaction(root, backup_dir=tmp_path / "bk") as tx:
        tx.create_file("index/new", write)
        tx.commit()
    want = b"AAZZ" + b"A" * 6 + bytes(70_000)
    assert (root / "index" / "new").read_bytes() == want
    m = load_manifest(tmp_path / "bk")
    assert m["entries"][0]["result"]["sha256"] == hashlib.sha256(want).hexdigest()


def test_replaced_and_removed_files_backed_up_by_link_survive_and_restore(tmp_path: Path) -> None:
    root = _store(tmp_path)
    old_a = os.urandom(300_000)
    old_b = os.urandom(5000)
    (root / "index" / "a").write_bytes(old_a)
    (root / "commitlog" / "b").write_bytes(old_b)
    bk = tmp_path / "bk"
    with StoreTransaction(root, backup_dir=bk) as tx:
        tx.replace_file("index/a", b"new content")
        tx.remove_file("commitlog/b")
        tx.commit()
    assert (root / "index" / "a").read_bytes() == b"new content"
    assert not (root / "commitlog" / "b").exists()
    assert (bk / "files" / "index" / "a").read_bytes() == old_a
    assert (bk / "files" / "commitlog" / "b").read_bytes() == old_b
    verify_backup(bk)
    # the new file in the store is not the backup's inode
    assert os.stat(root / "index" / "a").st_ino != os.stat(bk / "files" / "index" / "a").st_ino
    restore(bk, root)
    assert (root / "index" / "a").read_bytes() == old_a
    assert (root / "commitlog" / "b").read_bytes() == old_b
    # a restored file is a copy: writing it in place leaves the backup intact
    with open(root / "index" / "a", "r+b") as f:
        f.write(b"\xff" * 16)
    assert (bk / "files" / "index" / "a").read_bytes() == old_a


@pytest.mark.parametrize("touch", [False, True])
def test_big_file_hashed_ahead_gives_the_backup_digest(tmp_path: Path, touch: bool) -> None:
    root = _store(tmp_path)
    old = os.urandom(1 << 16) * 300  # 19.7 MB: hashed on a background thread at planning
    (root / "index" / "big").write_bytes(old)
    bk = tmp_path / "bk"
    with StoreTransaction(root, backup_dir=bk) as tx:
        tx.replace_file("index/big", b"small")
        if touch:  # changed after planning, same size: the early digest must not be used
            with open(root / "index" / "big", "r+b") as f:
                f.write(b"\0" * 8)
            st = os.stat(root / "index" / "big")
            os.utime(root / "index" / "big", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
        tx.commit()
    want = (b"\0" * 8 + old[8:]) if touch else old
    m = load_manifest(bk)
    assert m["entries"][0]["original"]["sha256"] == hashlib.sha256(want).hexdigest()
    assert (bk / "files" / "index" / "big").read_bytes() == want
    verify_backup(bk)


def test_several_files_hashed_behind_the_staging(tmp_path: Path) -> None:
    """Digests are taken at commit while the hashing of earlier files goes on: every file's
    manifest digest is its content's; a transaction that fails before commit leaves the
    store as it was."""
    import threading

    root = _store(tmp_path)
    parts = {f"index/f{i}": [os.urandom(70_000 + i), (1 << 23) + 17 * i, b"end%d" % i] for i in range(4)}
    with pytest.raises(RuntimeError), StoreTransaction(root, backup_dir=tmp_path / "bk0") as tx:
        for rel, p in parts.items():
            tx.create_file(rel, _seq_writer(p))
        raise RuntimeError("before commit")
    assert sorted(p.name for p in (root / "index").iterdir()) == []
    assert not any(t.name == "rmqtool-sha256" and t.is_alive() for t in threading.enumerate())
    with StoreTransaction(root, backup_dir=tmp_path / "bk") as tx:
        for rel, p in parts.items():
            tx.create_file(rel, _seq_writer(p))
        tx.commit()
    m = load_manifest(tmp_path / "bk")
    got = {e["path"]: e["result"]["sha256"] for e in m["entries"]}
    for rel, p in parts.items():
        want = b"".join(bytes(x) if isinstance(x, int) else x for x in p)
        assert (root / rel).read_bytes() == want
        assert got[rel] == hashlib.sha256(want).hexdigest()


def test_a_sparse_file_is_backed_up_with_its_holes_and_hashed_whole(tmp_path: Path) -> None:
    """copy_to_backup (a backup on another file system) keeps a sparse file's holes: a
    commitlog file sparse-extended to 64 GiB takes its few data blocks, not 64 GiB of
    zeros written (the sha256 is still that of every byte)."""
    from rmqtool.recovery.safety.backup import copy_to_backup
    from rmqtool.recovery.safety.digests import digest_matches

    src = tmp_path / "src"
    with open(src, "wb") as f:
        f.write(b"\x01" * 5000)
        f.seek(1 << 30)
        f.write(b"\x02" * 100)
        f.truncate(64 << 30)
    if os.stat(src).st_blocks * 512 > (1 << 20):
        pytest.skip("this file system does not keep holes")
    dst = tmp_path / "dst"
    digest = copy_to_backup(src, dst)
    assert os.stat(dst).st_size == 64 << 30 and os.stat(dst).st_blocks * 512 < (1 << 20)
    assert digest.endswith("z") and digest_matches(src, digest) and digest_matches(dst, digest)
    with open(dst, "r+b") as f:  # (and it tells a changed byte in the hole)
        f.seek(3 << 30)
        f.write(b"\x03")
    assert not digest_matches(dst, digest)
    with open(dst, "rb") as f:
        assert f.read(5001) == b"\x01" * 5000 + b"\0"
        f.seek(1 << 30)
        assert f.read(101) == b"\x02" * 100 + b"\0"


def test_the_room_a_backup_needs_counts_allocated_blocks(tmp_path: Path) -> None:
    """A whole file the transaction removes or replaces is hard-linked into a backup on the
    store's file system, else copied with its holes: the room counted is its allocated
    blocks (a link can fail): recover on a store with a commitlog file sparse-extended to
    64 GiB needed 64 GiB free and refused."""
    from rmqtool.recovery.safety.backup import backup_bytes_needed
    from rmqtool.recovery.safety.plan import Step

    store = tmp_path / "store"
    store.mkdir()
    with open(store / "big", "wb") as f:
        f.write(b"\x01" * 4096)
        f.truncate(64 << 30)
    steps = [Step("remove", "big", orig_size=64 << 30), Step("truncate_tail", "other", offset=10, length=300)]
    assert backup_bytes_needed(steps) == (64 << 30) + 300
    allocated = os.stat(store / "big").st_blocks * 512
    assert backup_bytes_needed(steps, store) == min(allocated, 64 << 30) + 300


@pytest.mark.parametrize("which", ["backup", "restore"])
def test_a_file_of_many_extents_is_copied_byte_for_byte(
    tmp_path: Path, which: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both hole-keeping copies (a backup's copy_to_backup, the staging copy of restore)
    find the extents with lseek on the descriptor they read from: through a buffered
    reader, a seek inside its buffer did not move the descriptor and bytes were skipped
    (seen with 8 and 128 KiB buffers on 4 KiB extents; the digest then described the bad
    copy). 4 KiB of data and 4 KiB of hole, 128 times, then a 1 MiB hole."""
    import builtins

    from rmqtool.recovery.safety import apply as apply_mod
    from rmqtool.recovery.safety import backup as backup_mod
    from rmqtool.recovery.safety.apply import copy_holes_kept
    from rmqtool.recovery.safety.backup import copy_to_backup
    from rmqtool.recovery.safety.digests import Hasher, digest_matches

    def big_buffers(file: Any, mode: str = "r", buffering: int = -1, *a: Any, **k: Any) -> Any:
        # (a file system whose block size is larger than its holes: a 128 KiB buffer)
        return builtins.open(file, mode, 128 << 10 if buffering == -1 and "b" in mode else buffering, *a, **k)

    monkeypatch.setattr(apply_mod, "open", big_buffers, raising=False)
    monkeypatch.setattr(backup_mod, "open", big_buffers, raising=False)

    src = tmp_path / "src"
    with open(src, "wb") as f:
        for i in range(128):
            f.seek(i * 8192)
            f.write(bytes([i % 251 + 1]) * 4096)
        f.truncate(128 * 8192 + (1 << 20))
    dst = tmp_path / "dst"
    if which == "backup":
        digest = copy_to_backup(src, dst)
        assert digest_matches(src, digest)
    else:
        h = Hasher()
        with open(dst, "wb") as out:
            copy_holes_kept(src, out, h)
        h.hexdigest()
        h.close()
    assert dst.read_bytes() == src.read_bytes()


def test_info_keeps_a_queue_unit_cut_by_a_data_extents_end(tmp_path: Path) -> None:
    """storeinfo's data prefix of a queue file ends at its last data extent, rounded up to a
    whole unit: unit 204 (bytes 4080-4099, its tagsCode 0) straddles the 4 KiB extent end
    of a file whose rest is a hole (rsync -S, cp --sparse=always) and is still the last."""
    import struct

    from rmqtool.recovery.store import map_readonly
    from rmqtool.recovery.storeinfo import _data_prefix

    path = tmp_path / "cq"
    units = b"".join(struct.pack(">qiq", 1000 + 100 * i, 100, 0) for i in range(205))
    with open(path, "wb") as f:
        f.write(units[:4096])
        f.truncate(6_000_000)
    fd = os.open(path, os.O_RDONLY)
    try:
        m = map_readonly(fd, 6_000_000)
    finally:
        os.close(fd)
    if m.data_extents != [(0, 4096)]:
        pytest.skip(f"this file system reports the extents {m.data_extents[:3]}")
    prefix = _data_prefix(m)
    assert len(prefix) == 205 * 20 and bytes(prefix) == units
    del prefix
    m.close()
