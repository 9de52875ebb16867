"""The rubrics and the kit's file lists: which assignments exist, each one's rubric
(grader/assignment<N>/rubric.json), the student files of every assignment, the suites and
case patterns the items grade.
"""
import fnmatch
import json
import re
from pathlib import Path


KIT = Path(__file__).resolve().parent.parent


def rubric_path(kit: Path, assignment: int) -> Path:
    """Assignment N's rubric: grader/assignment<N>/rubric.json."""
    return kit / "grader" / f"assignment{assignment}" / "rubric.json"


def assignments(kit=KIT) -> list:
    """The assignment numbers this kit has a rubric for (grader/assignment<N>/rubric.json), in order."""
    found = [int(m.group(1)) for p in (kit / "grader").glob("assignment*/rubric.json")
             if (m := re.fullmatch(r"assignment([0-9]+)", p.parent.name)) and int(m.group(1)) >= 1]
    return sorted(found)


def load_rubric(kit=KIT, assignment=1):
    if assignment not in assignments(kit):
        raise ValueError(f"there is no assignment {assignment}: this kit has assignments "
                         + ", ".join(map(str, assignments(kit)))
                         + " (assignment N is grader/assignment<N>/rubric.json)")
    return json.loads(rubric_path(kit, assignment).read_text())


def all_student_files(kit=KIT) -> list:
    """Every assignment's student files (the build compiles them all: the ones not graded now
    are the kit's starter stubs)."""
    out = []
    lists = [load_rubric(kit, a)["student_files"] for a in assignments(kit)]
    # a student bundle has its own rubrics only; grader/bundle.json lists every assignment's files
    lists += list(bundle_info(kit).get("student_files", {}).values())
    for files in lists:
        out += [f for f in files if f not in out]
    return out


def graded_suites(rubric) -> list:
    """The test suites the rubric's items use (a test name is <suite>.<gtest name>)."""
    return sorted({t.split(".")[0] for it in rubric["items"] for t in it.get("tests", [])})


def enabled_items(rubric, perf_gates=False):
    """The rubric without its disabled items ("enabled": false: the speed gates as shipped);
    perf_gates (--perf-gates) turns every speed gate on."""
    rubric = dict(rubric)
    rubric["items"] = [it for it in rubric["items"]
                       if it.get("enabled", True) or (perf_gates and "performance" in it)]
    return rubric


def bundle_info(kit=KIT) -> dict:
    """grader/bundle.json of a student bundle (package.py writes it: the assignment, which earlier
    assignments' reference solutions it carries), or {} in the instructor's kit."""
    path = kit / "grader" / "bundle.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def unmatched_patterns(rubric, cases) -> list:
    """The rubric's test patterns that match no case in `cases`."""
    return [p for it in rubric["items"] for p in it.get("tests", [])
            if not any(fnmatch.fnmatchcase(n, p) for n in cases)]


def check_patterns(rubric, cases, hidden=()):
    """Every test pattern of the rubric matches a case (but the `hidden` ones): else the rubric
    and the kit disagree, and grading stops rather than score an item on fewer cases."""
    unmatched = [p for p in unmatched_patterns(rubric, cases) if p not in hidden]
    if unmatched:
        raise RuntimeError("rubric test patterns that match no case of the kit: " + ", ".join(unmatched))


def hidden_patterns(rubric, cases) -> list:
    """The rubric's test patterns that match no case of this build because their cases are
    hidden (grader/hidden_tests/, which only the instructor's grader has: Hidden* by name)."""
    return [p for p in unmatched_patterns(rubric, cases) if ".Hidden" in p]
