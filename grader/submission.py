"""Taking a submission apart: unzipping it safely, reading only the student files the rubric
names (never a link), and copying trees.
"""
import os
import shutil
import stat
import struct
import zipfile
from pathlib import Path


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


# What a clean copy of the kit leaves out: builds, VCS, the reference solution, local data,
# figures and the grader's own wrong submissions. TOP_IGNORE applies only at the kit's root
# (starter/data/ is given code and must be copied).
TOP_IGNORE = shutil.ignore_patterns("build*", "solution", "data", "runs", "submit_figures", ".venv*")


ANY_IGNORE = shutil.ignore_patterns(".git", "__pycache__", "*.pyc", "wrong_submissions")


MAX_UNPACKED = 256 * 1024 ** 2  # bytes a submission zip may unpack to


def unpack(submission: Path, scratch: Path) -> Path:
    """The submission's root directory (a zip is extracted; one enclosing folder is entered)."""
    if not submission.exists():
        raise FileNotFoundError(f"submission {submission} does not exist")
    if submission.is_file():
        if not zipfile.is_zipfile(submission):
            raise ValueError(f"submission {submission} is neither a directory nor a zip file")
        root = (scratch / "unzipped").resolve()
        with zipfile.ZipFile(submission) as z:
            members = z.infolist()
            if sum(m.file_size for m in members) > MAX_UNPACKED:
                raise ValueError(f"the zip unpacks to more than {MAX_UNPACKED >> 20} MiB: submit only the "
                                 "student files and submit_figures/")
            for m in members:  # refuse paths that escape the extraction directory, and links
                target = (root / m.filename).resolve()
                if target != root and root not in target.parents:
                    raise ValueError(f"zip member {m.filename} points outside the archive")
                if stat.S_ISLNK(m.external_attr >> 16):
                    raise ValueError(f"zip member {m.filename} is a symbolic link: submit the file itself")
            z.extractall(root)
        submission = root
    entries = [p for p in submission.iterdir() if p.name not in ("__MACOSX", ".DS_Store")]
    if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
        return entries[0]
    return submission


def regular_file(root: Path, rel: str):
    """root/rel when it is a regular file reached without any symbolic link, else None."""
    path = root
    for part in Path(rel).parts:
        path = path / part
        try:
            st = os.lstat(path)
        except OSError:
            return None
        if stat.S_ISLNK(st.st_mode):
            return None
    return path if stat.S_ISREG(st.st_mode) else None


def read_nofollow(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def collect(root: Path, rubric):
    """(student files found {f: path}, figures {name: path}, ignored relative paths).
    Symbolic links are never followed: a link is listed as ignored, whatever it points to."""
    found, figures, used = {}, {}, set()
    for f in rubric["student_files"]:
        for rel in ("starter/" + f, f):
            cand = regular_file(root, rel)
            if cand:
                found[f] = cand
                used.add(cand)
                break
    fig_dir = root / "submit_figures"
    if fig_dir.is_dir() and not fig_dir.is_symlink():
        for p in sorted((root / "submit_figures").iterdir()):
            if regular_file(root, "submit_figures/" + p.name):
                figures[p.name] = p
                used.add(p)
    ignored = []
    for dirpath, dirnames, filenames in os.walk(root):  # does not descend into linked directories
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            p = Path(dirpath) / name
            if p not in used:
                ignored.append(str(p.relative_to(root)) + (" (a symbolic link)" if p.is_symlink() else ""))
    return found, figures, sorted(ignored)


def sync_tree(src: Path, dst: Path, skip=()):
    """Copy src to dst but `skip` (relative paths), rewriting only files whose content changed
    (keeps rebuilds incremental), and remove what dst has that src no longer has (a test file
    deleted from the kit, or one from another checkout that graded in the same work dir, must
    not be built and graded)."""
    wanted = set()
    for dirpath, dirnames, filenames in os.walk(src):
        rel = Path(dirpath).relative_to(src)
        ignored = ANY_IGNORE(dirpath, dirnames + filenames)
        if rel == Path("."):
            ignored |= TOP_IGNORE(dirpath, dirnames + filenames)
        dirnames[:] = [d for d in dirnames if d not in ignored]
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for name in filenames:
            if name in ignored:
                continue
            wanted.add(rel / name)
            if str(rel / name) in skip:
                continue
            path, out = Path(dirpath) / name, dst / rel / name
            if not out.exists() or out.read_bytes() != path.read_bytes():
                shutil.copy2(path, out)
                os.utime(out)  # a fresh mtime, so make rebuilds what changed
    for dirpath, dirnames, filenames in os.walk(dst, topdown=False):
        rel = Path(dirpath).relative_to(dst)
        for name in filenames:
            if rel / name not in wanted:
                os.unlink(Path(dirpath) / name)
        if rel != Path(".") and not os.listdir(dirpath):
            os.rmdir(dirpath)


def put(path: Path, data: bytes):
    if not path.exists() or path.read_bytes() != data:
        path.write_bytes(data)


def png_ok(path: Path):
    data = read_nofollow(path)[:33]
    if len(data) < 33 or data[:8] != PNG_SIGNATURE or data[12:16] != b"IHDR":
        return False, "not a PNG file"
    w, h = struct.unpack(">II", data[16:24])
    if w == 0 or h == 0:
        return False, "PNG with zero size"
    return True, f"{w}x{h} PNG"
