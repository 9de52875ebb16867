"""Which object files a build made from which sources: a student file's object, the given
code's and test programs' objects, and those a prebuilt build can lend (KIT_PREBUILT_STUBS).
"""
import re
from pathlib import Path

# Where a KIT_SOLUTION build keeps its objects of the student files (under CMakeFiles/): each
# assignment's solution, and the starter stubs (the grader's references link those).
OBJECT_DIRS = {"solution": ["kit_student.dir/solution", "kit_planner.dir/solution"],
               "starter": ["kit_reference.dir/starter", "kit_planner_starter_check.dir/starter"]}


def prebuilt_copies(prebuilt: str, kit_copy: Path, files) -> dict:
    """{student file: its object in the prebuilt build} for each file of kit_copy/starter that is
    byte for byte that build's starter stub or (a KIT_SOLUTION build) its solution: CMake's
    KIT_PREBUILT_STUBS links those objects instead of compiling the same source again (the
    self-tests grade the solution, and files left as stubs, in no compile time)."""
    cache = (Path(prebuilt) / "CMakeCache.txt").read_text(errors="replace")
    home = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", cache, re.M)
    solution = re.search(r"^KIT_SOLUTION:BOOL=(ON|TRUE|1)$", cache, re.M | re.I)
    out = {}
    for f in files:
        mine = (kit_copy / "starter" / f).read_bytes()
        for side, dirs in OBJECT_DIRS.items():
            src = Path(home.group(1)) / side / f if home else None
            if (side == "solution" and not solution) or not src or not src.is_file() or src.read_bytes() != mine:
                continue
            objs = [Path(prebuilt) / "CMakeFiles" / d / (f + ".o") for d in dirs]
            objs = [o for o in objs if o.is_file()]
            if objs:
                out[f] = objs[0]
                break
    return out


def student_object(build_dir: Path, f: str):
    """The object file the build compiled from student file f (libkit_student's or the planner's), or None."""
    for target in ("kit_student", "kit_planner"):
        for top in ("starter", "solution"):
            obj = build_dir / "CMakeFiles" / f"{target}.dir" / top / (f + ".o")
            if obj.is_file():
                return obj
    return None


def given_objects(build_dir: Path, student_files, prebuilt=""):
    """The objects of the given code and of the test programs in a build (those it linked from
    a prebuilt build included): what a student object must not redefine, and where given code
    that touches files lives."""
    mine = {str(Path(top) / (f + ".o")) for f in student_files for top in ("starter", "solution")}
    out = []
    base = Path(prebuilt) if prebuilt else build_dir
    dirs = [base / "CMakeFiles" / "kit_given.dir", build_dir / "CMakeFiles" / "kit_planner.dir", build_dir / "tests"]
    if prebuilt:
        dirs.append(base / "tests")
    for d in dirs:
        if d.is_dir():
            out += [o for o in sorted(d.rglob("*.o")) if not any(str(o).endswith("/" + m) for m in mine)]
    return out
