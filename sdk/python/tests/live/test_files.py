"""Files: text, bytes, streamed up- and downloads, directories, moves, errors."""

import hashlib
import os

import pytest

import warren


def test_write_and_read_text_and_bytes(sb):
    r = sb.write_file("/workspace/f/hello world.txt", "héllo\n")
    assert (r.path, r.size) == ("/workspace/f/hello world.txt", 7)
    assert r.sha256 == hashlib.sha256("héllo\n".encode()).hexdigest()
    assert sb.read_file("/workspace/f/hello world.txt") == "héllo\n"
    blob = bytes(range(256)) * 4
    sb.write_file("/workspace/f/blob.bin", blob, mode="0600")
    assert sb.read_file_bytes("/workspace/f/blob.bin") == blob
    assert sb.stat("/workspace/f/blob.bin").mode == "0600"
    sb.write_file("/workspace/f/run.sh", "#!/bin/sh\necho ran\n", mode=0o755)
    assert sb.exec("/workspace/f/run.sh").stdout == "ran\n"


def test_streamed_upload_and_download(sb):
    chunk = os.urandom(256 * 1024)
    n = 12  # 3 MiB, sent as a generator: never one buffer

    def gen():
        for i in range(n):
            yield chunk[i:] + chunk[:i]

    want = hashlib.sha256(b"".join(gen())).hexdigest()
    r = sb.write_file("/workspace/f/big.bin", gen())
    assert (r.size, r.sha256) == (n * len(chunk), want)
    h = hashlib.sha256()
    count = 0
    with sb.read_file_stream("/workspace/f/big.bin") as s:
        assert s.size == n * len(chunk)
        for part in s:
            h.update(part)
            count += 1
    assert h.hexdigest() == want and count > 1
    with open(os.devnull, "rb") as empty:
        assert sb.write_file("/workspace/f/empty", empty).size == 0


def test_directories_listing_moves_and_deletes(sb):
    sb.mkdir("/workspace/d/a/b", recursive=True)
    sb.mkdir("/workspace/d/a/b", recursive=True)
    with pytest.raises(warren.AlreadyExistsError):
        sb.mkdir("/workspace/d/a")
    sb.write_file("/workspace/d/a/b/x.txt", "x")
    sb.write_file("/workspace/d/.hidden", "h")
    names = [e.relative_path for e in sb.list_files("/workspace/d", recursive=True)]
    assert names == ["a", "a/b", "a/b/x.txt"]
    hidden = [e.name for e in sb.list_files("/workspace/d", hidden=True)]
    assert ".hidden" in hidden
    entry = next(e for e in sb.list_files("/workspace/d/a/b"))
    assert (entry.name, entry.type, entry.size, entry.is_file) == ("x.txt", "file", 1, True)
    assert sb.exists("/workspace/d/a/b/x.txt") and not sb.exists("/workspace/d/nope")
    assert sb.stat("/workspace/d/a").is_directory
    sb.move_file("/workspace/d/a/b/x.txt", "/workspace/d/moved/y.txt")
    assert sb.read_file("/workspace/d/moved/y.txt") == "x"
    sb.rename_file("/workspace/d/moved/y.txt", "z.txt")
    assert sb.exists("/workspace/d/moved/z.txt") and not sb.exists("/workspace/d/moved/y.txt")
    sb.write_file("/workspace/d/other.txt", "o")
    with pytest.raises(warren.ConflictError):
        sb.move_file("/workspace/d/other.txt", "/workspace/d/moved/z.txt")
    sb.move_file("/workspace/d/other.txt", "/workspace/d/moved/z.txt", overwrite=True)
    assert sb.read_file("/workspace/d/moved/z.txt") == "o"
    with pytest.raises(warren.WarrenIsADirectoryError):
        sb.delete_file("/workspace/d/a")
    sb.delete_file("/workspace/d/a", recursive=True)
    sb.delete_file("/workspace/d/moved/z.txt")
    assert not sb.exists("/workspace/d/a")


def test_file_errors_are_typed(sb):
    with pytest.raises(warren.WarrenFileNotFoundError) as ei:
        sb.read_file("/workspace/no/such/file")
    assert ei.value.status == 404 and ei.value.request_id
    with pytest.raises(warren.WarrenIsADirectoryError):
        sb.read_file("/workspace")
    with pytest.raises(warren.WarrenFileNotFoundError):
        sb.delete_file("/workspace/no-such")
    with pytest.raises(warren.WarrenFileNotFoundError):
        sb.move_file("/workspace/no-such", "/workspace/x")
    sb.write_file("/workspace/plainfile", "p")
    with pytest.raises(warren.WarrenNotADirectoryError):
        sb.write_file("/workspace/plainfile/child", "c")
    with pytest.raises(warren.ForbiddenError):
        sb.write_file("/.warren/x", "no")


def test_directories_travel_as_tar_both_ways(sb):
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        top = tarfile.TarInfo("app")
        top.type, top.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(top)
        for name, data, mode in [("app/main.py", b"print('hi')\n", 0o755), ("README", b"read me\n", 0o644)]:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("latest")
        link.type, link.linkname = tarfile.SYMTYPE, "app/main.py"
        tar.addfile(link)
    r = sb.upload_dir("/workspace/tree/up", buf.getvalue())
    assert (r["path"], r["entries"]) == ("/workspace/tree/up", 4)
    assert sb.exec("python3 /workspace/tree/up/latest").stdout == "hi\n"
    assert sb.stat("/workspace/tree/up/app/main.py").mode == "0755"

    # Down again, as a stream: the same entries, relative to the directory.
    got = io.BytesIO()
    with sb.download_dir("/workspace/tree/up") as s:
        for part in s:
            got.write(part)
    got.seek(0)
    with tarfile.open(fileobj=got, mode="r") as tar:
        members = {m.name.rstrip("/"): m for m in tar.getmembers()}
        assert members["latest"].issym() and members["latest"].linkname == "app/main.py"
        assert tar.extractfile(members["README"]).read() == b"read me\n"
    assert {"app", "app/main.py", "README", "latest"} <= set(members)

    # All or nothing, and never over something that is there.
    with pytest.raises(warren.AlreadyExistsError):
        sb.upload_dir("/workspace/tree/up", buf.getvalue())
    evil = io.BytesIO()
    with tarfile.open(fileobj=evil, mode="w") as tar:
        info = tarfile.TarInfo("../escaped")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(warren.InvalidArgumentError):
        sb.upload_dir("/workspace/tree/evil", evil.getvalue())
    assert not sb.exists("/workspace/tree/escaped") and not sb.exists("/workspace/tree/evil")
    with pytest.raises(warren.WarrenNotADirectoryError):
        sb.download_dir("/workspace/tree/up/README")
