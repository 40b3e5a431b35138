"""sync_train_code's archive: the version-controlled files of a source tree as a zip, like
`git archive` but with the working-tree contents (uncommitted edits included), so the server builds
exactly what is on disk. Untracked files that .gitignore does not exclude are included too (a new
source file must not be silently left out); ignored files (build directories) never are.
"""

from __future__ import annotations

import io
import os
import stat
import subprocess
import zipfile
from typing import List


def tracked_files(root: str) -> List[str]:
    """Paths (relative, '/'-separated) that `git ls-files` lists for `root`, existing regular files only."""
    try:
        out = subprocess.run(
            ["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            check=True, capture_output=True,
        ).stdout
    except FileNotFoundError as e:
        raise RuntimeError("sync_train_code_from_dir needs git on PATH (it sends version-controlled files only)") from e
    except subprocess.CalledProcessError as e:
        raise RuntimeError(f"sync_train_code_from_dir: {root} is not a git work tree "
                           f"(git ls-files: {e.stderr.decode(errors='replace').strip()})") from e
    files = []
    for raw in out.split(b"\0"):
        if not raw:
            continue
        rel = raw.decode("utf-8", errors="surrogateescape")
        full = os.path.join(root, rel)
        try:
            st = os.lstat(full)
        except FileNotFoundError:
            continue  # deleted in the work tree
        if stat.S_ISREG(st.st_mode):
            files.append(rel)
    return sorted(set(files))


def zip_tree(root: str) -> bytes:
    """A deflated zip of tracked_files(root), members relative to the tree root."""
    root = os.path.abspath(root)
    if not os.path.isfile(os.path.join(root, "CMakeLists.txt")):
        raise RuntimeError(f"sync_train_code_from_dir: {root} has no CMakeLists.txt (give the source tree's root)")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for rel in tracked_files(root):
            full = os.path.join(root, rel)
            info = zipfile.ZipInfo(rel, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            mode = os.stat(full).st_mode
            info.external_attr = ((stat.S_IFREG | (0o755 if mode & 0o111 else 0o644)) & 0xFFFF) << 16
            with open(full, "rb") as f:
                zf.writestr(info, f.read())
    return buf.getvalue()
