"""Which object files a build made from which sources: a student file's object, the given
code's and test programs' objects, and those a prebuilt build can lend (KIT_PREBUILT_STUBS).

Every build writes them in kit_objects.json (cmake/Objects.cmake, from each target's sources and
$<TARGET_OBJECTS>): nothing here knows where CMake keeps its objects.
"""
import functools
import json
import re
from pathlib import Path

MANIFEST = "kit_objects.json"


class NoManifest(RuntimeError):
    pass


@functools.lru_cache(maxsize=16)
def _manifest_at(path: str, mtime_ns: int) -> dict:
    m = json.loads(Path(path).read_text())
    if m.get("format") != "kit objects 1":
        raise NoManifest(f"{path} is not a kit object manifest: configure the build again with this kit")
    return m


def manifest(build_dir) -> dict:
    """The build's kit_objects.json. NoManifest where it has none (a build configured by an
    older kit, or no build at all)."""
    path = Path(build_dir) / MANIFEST
    if not path.is_file():
        raise NoManifest(f"{build_dir} has no {MANIFEST}: configure it with this kit's CMakeLists.txt, then build it")
    return _manifest_at(str(path), path.stat().st_mtime_ns)


def file_object(build_dir, path: str):
    """The object the build compiled from the student file at `path` of its source tree
    (starter/<f> or solution/<f>), or None where it compiled none or it is not there."""
    entry = manifest(build_dir)["files"].get(path)
    obj = Path(entry["objects"][0]) if entry and entry["objects"] else None
    return obj if obj and obj.is_file() else None


def prebuilt_copies(prebuilt: str, kit_copy: Path, files) -> dict:
    """{student file: its object in the prebuilt build} for each file of kit_copy/starter that is
    byte for byte that build's starter stub or (a KIT_SOLUTION build) its solution: CMake's
    KIT_PREBUILT_STUBS links those objects instead of compiling the same source again (the
    self-tests grade the solution, and files left as stubs, in no compile time)."""
    solution = solution_build(prebuilt)
    home = Path(manifest(prebuilt)["source_dir"])
    out = {}
    for f in files:
        mine = (kit_copy / "starter" / f).read_bytes()
        for side in ("starter", "solution"):
            src = home / side / f
            if (side == "solution" and not solution) or not src.is_file() or src.read_bytes() != mine:
                continue
            obj = file_object(prebuilt, f"{side}/{f}")
            if obj:
                out[f] = obj
                break
    return out


def solution_build(build_dir) -> bool:
    """Whether the build takes the student files from solution/ (-DKIT_SOLUTION=ON)."""
    cache = (Path(build_dir) / "CMakeCache.txt").read_text(errors="replace")
    return bool(re.search(r"^KIT_SOLUTION:BOOL=(ON|TRUE|1)$", cache, re.M | re.I))


def student_object(build_dir: Path, f: str):
    """The object file the build compiled from student file f into libkit_student or the
    planner (its solution/ copy in a KIT_SOLUTION build, else its starter/ copy), or None."""
    return file_object(build_dir, ("solution/" if solution_build(build_dir) else "starter/") + f)


# The targets that hold the given code's objects (kit: those it links from a prebuilt build's
# kit_given), and the folder of the test programs'.
GIVEN_TARGETS = ("kit_given", "kit", "kit_planner")
TEST_FOLDER = "tests"


def given_objects(build_dir, prebuilt=""):
    """The objects of the given code and of the test programs in a build, those it linked from
    a prebuilt build included: what a student object must not redefine, and where given code
    that touches files lives. No student file's object is among them (a file lent by the
    prebuilt build neither)."""
    builds = [manifest(build_dir)] + ([manifest(prebuilt)] if prebuilt else [])
    students = {o for m in builds for e in m["files"].values() for o in e["objects"]}
    out = set()
    for name, entry in builds[0]["targets"].items():
        if name in GIVEN_TARGETS or entry["folder"] == TEST_FOLDER:
            out.update(o for o in entry["objects"] if o.endswith(".o") and o not in students)
    return [Path(o) for o in sorted(out) if Path(o).is_file()]
