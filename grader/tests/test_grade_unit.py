#!/usr/bin/env python3
"""Unit tests of grade.py, sandbox.py and perf_gates.py that need no build: unpacking, symbolic
links, hanging pipes, the static checks, the verdict rules, the sandbox's containment and the
speed gates' protocol (with a stand-in worker).

    python3 grader/tests/test_grade_unit.py        (ctest: grader.grade_unit)
"""
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import zipfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

GRADER = Path(__file__).resolve().parent.parent
KIT = GRADER.parent
sys.path.insert(0, str(GRADER))
import grade  # noqa: E402
import mutate  # noqa: E402
import perf_gates  # noqa: E402
import sandbox  # noqa: E402
import symbols  # noqa: E402

RUBRIC = grade.load_rubric()


def processes_with(marker: str):
    """pids whose command line contains marker."""
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{d}/cmdline").read_bytes():
                    pids.append(int(d))
            except OSError:
                pass
    return pids


class Unpack(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp())

    def zip_with(self, members):
        path = self.tmp / "sub.zip"
        with zipfile.ZipFile(path, "w") as z:
            for name, data in members:
                z.writestr(name, data)
        return path

    def test_member_in_a_sibling_directory_is_refused(self):
        # "unzipped-evil" starts with "unzipped": a prefix test without a separator let it through.
        z = self.zip_with([("pipeline/pipe.cpp", "x"), ("../unzipped-evil/planted.txt", "y")])
        scratch = self.tmp / "scratch"
        scratch.mkdir()
        with self.assertRaisesRegex(ValueError, "outside the archive"):
            grade.unpack(z, scratch)
        self.assertFalse((scratch / "unzipped-evil").exists())

    def test_absolute_and_parent_members_are_refused(self):
        for bad in ("/etc/planted", "a/../../planted"):
            scratch = Path(tempfile.mkdtemp(dir=self.tmp))
            with self.assertRaisesRegex(ValueError, "outside the archive"):
                grade.unpack(self.zip_with([(bad, "y")]), scratch)

    def test_symlink_member_is_refused(self):
        path = self.tmp / "link.zip"
        with zipfile.ZipFile(path, "w") as z:
            info = zipfile.ZipInfo("pipeline/pipe.cpp")
            info.external_attr = (0o120777 << 16)
            z.writestr(info, "/etc/passwd")
        with self.assertRaisesRegex(ValueError, "symbolic link"):
            grade.unpack(path, self.tmp)

    def test_an_ordinary_zip_with_one_folder_is_entered(self):
        root = grade.unpack(self.zip_with([("me/pipeline/pipe.cpp", "x")]), self.tmp)
        self.assertEqual(root.name, "me")


class Collect(unittest.TestCase):
    def test_symbolic_links_are_never_followed(self):
        secret = KIT / "solution" / "pipeline" / "pipe.cpp"
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            (root / "pipeline").mkdir()
            os.symlink(secret, root / "pipeline" / "pipe.cpp")          # a file link
            os.symlink(secret.parent, root / "project")                   # a directory link
            (root / "data_parallel").mkdir()
            (root / "data_parallel" / "dataset.cpp").write_text("// mine\n")
            (root / "submit_figures").mkdir()
            os.symlink("/etc/passwd", root / "submit_figures" / "dp_training_time.png")
            found, figures, ignored = grade.collect(root, RUBRIC)
        self.assertEqual(sorted(found), ["data_parallel/dataset.cpp"])
        self.assertEqual(figures, {})
        self.assertIn("pipeline/pipe.cpp (a symbolic link)", ignored)
        self.assertIn("project (a symbolic link)", ignored)


class Assignments(unittest.TestCase):
    """--assignment N: its rubric is grader/assignment<N>/rubric.json."""

    def fake_kit(self, root: Path):
        """A kit with two assignments: a1.cpp (assignment 1) and a2.cpp (assignment 2)."""
        (root / "grader" / "assignment1").mkdir(parents=True)
        (root / "grader" / "assignment2").mkdir(parents=True)
        (root / "grader" / "assignment1" / "rubric.json").write_text('{"student_files": ["p/a1.cpp"], "items": []}')
        (root / "grader" / "assignment2" / "rubric.json").write_text(
            '{"assignment": 2, "student_files": ["q/a2.cpp"], "items": []}')
        (root / "grader" / "assignment2x").mkdir()  # not an assignment folder
        (root / "grader" / "assignment2x" / "rubric.json").write_text("{}")
        for f in ("p/a1.cpp", "q/a2.cpp", "q/given.h"):
            (root / "starter" / f).parent.mkdir(parents=True, exist_ok=True)
            (root / "starter" / f).write_text(f"// stub of {f}\n")
        return root

    def test_each_test_item_has_a_label_that_selects_it_alone(self):
        # ctest -L takes a regular expression and searches every label of a case: an item's
        # label must match no other label a case can carry (other items', suites', needs_a<K>).
        rubrics = [grade.load_rubric(assignment=n) for n in grade.assignments()]
        labels = [it.get("label") for r in rubrics for it in r["items"] if "tests" in it]
        self.assertNotIn(None, labels, "every item with tests needs a label (tests/graded_cases.cmake)")
        suites = {t.split(".")[0] for r in rubrics for it in r["items"] for t in it.get("tests", [])}
        others = set(labels) | suites | {"slow", "bench", "setup", "grader", "foundation", "plots",
                                         "in_solution_selftest", "grader_selftest", "grader_selftest_full"}
        others |= {f"needs_a{n}" for n in grade.assignments()}
        self.assertEqual(len(labels), len(set(labels)), "labels must differ")
        for label in labels:
            self.assertRegex(label, r"^p[0-9]+\.[0-9]+_[a-z0-9_]+$")
            self.assertEqual([o for o in others if o != label and re.search(label, o)], [], label)

    def test_each_assignment_reads_its_own_rubric(self):
        self.assertEqual(grade.assignments()[0], 1)
        self.assertEqual(grade.load_rubric(assignment=1), RUBRIC)
        self.assertIn("pipeline/pipe.cpp", RUBRIC["student_files"])
        if 2 in grade.assignments():
            a2 = grade.load_rubric(assignment=2)
            self.assertEqual(a2["assignment"], 2)
            self.assertFalse(set(a2["student_files"]) & set(RUBRIC["student_files"]))
            # Problem 3 (100 points) and Problem 4 (70): each problem keeps its own scale.
            self.assertEqual(sum(it["points"] for it in a2["items"] if it["name"].startswith("Problem 3")), 100)
            self.assertEqual(sum(it["points"] for it in a2["items"] if it["name"].startswith("Problem 4")), 70)
            self.assertEqual(grade.graded_suites(a2), ["pipeline_training", "tensor_parallel", "zero"])
        with tempfile.TemporaryDirectory() as tmp:
            kit = self.fake_kit(Path(tmp))
            self.assertEqual(grade.assignments(kit), [1, 2])
            self.assertEqual(grade.all_student_files(kit), ["p/a1.cpp", "q/a2.cpp"])

    def test_an_assignment_that_does_not_exist_is_an_error_naming_those_that_do(self):
        with self.assertRaisesRegex(ValueError, r"no assignment 7: this kit has assignments 1(, \d+)*"):
            grade.load_rubric(assignment=7)
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "results.json"
            r = subprocess.run([sys.executable, str(GRADER / "grade.py"), tmp, "--assignment", "0",
                                "--out", str(out)], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("there is no assignment 0: this kit has assignments 1", r.stderr)

    def test_other_assignments_files_in_a_submission_are_ignored(self):
        if 2 not in grade.assignments():
            self.skipTest("no assignment 2 in this kit")
        a2 = grade.load_rubric(assignment=2)
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            for f in ["pipeline/pipe.cpp", "starter/data_parallel/dataset.cpp"] + a2["student_files"]:
                (root / f).parent.mkdir(parents=True, exist_ok=True)
                (root / f).write_text("// mine\n")
            found, _, ignored = grade.collect(root, a2)
            self.assertEqual(sorted(found), sorted(a2["student_files"]))
            self.assertIn("pipeline/pipe.cpp", ignored)
            self.assertIn("starter/data_parallel/dataset.cpp", ignored)
            found1, _, ignored1 = grade.collect(root, RUBRIC)  # and the other way round
            self.assertEqual(sorted(found1), ["data_parallel/dataset.cpp", "pipeline/pipe.cpp"])
            self.assertTrue(set(a2["student_files"]) <= set(ignored1))

    def test_the_kit_copy_has_the_other_assignments_stubs_whatever_an_earlier_grading_left(self):
        with tempfile.TemporaryDirectory() as tmp:
            kit, work = self.fake_kit(Path(tmp) / "kit"), Path(tmp) / "work"
            copy = work / "kit"
            for f in ("p/a1.cpp", "q/a2.cpp"):  # an earlier grading's submission
                (copy / "starter" / f).parent.mkdir(parents=True, exist_ok=True)
                (copy / "starter" / f).write_text("// a student's code\n")
            grade.sync_kit(kit, work, grade.load_rubric(kit, 2))
            self.assertEqual((copy / "starter/p/a1.cpp").read_text(), "// stub of p/a1.cpp\n")
            self.assertEqual((copy / "starter/q/a2.cpp").read_text(), "// a student's code\n")  # put next
            grade.sync_kit(kit, work, grade.load_rubric(kit, 1))
            self.assertEqual((copy / "starter/q/a2.cpp").read_text(), "// stub of q/a2.cpp\n")

    def test_files_the_kit_no_longer_has_leave_the_copy(self):
        with tempfile.TemporaryDirectory() as tmp:
            kit, work = self.fake_kit(Path(tmp) / "kit"), Path(tmp) / "work"
            stale = work / "kit" / "tests" / "gone" / "old_test.cpp"
            stale.parent.mkdir(parents=True)
            stale.write_text("TEST(Old, Case) {}\n")
            (work / "kit" / "starter" / "q").mkdir(parents=True)
            (work / "kit" / "starter" / "q" / "a2.cpp").write_text("// a student's code\n")
            grade.sync_kit(kit, work, grade.load_rubric(kit, 2))
            self.assertFalse(stale.exists())
            self.assertFalse(stale.parent.exists())
            self.assertEqual((work / "kit/starter/q/a2.cpp").read_text(), "// a student's code\n")
            self.assertTrue((work / "kit/starter/q/given.h").is_file())

    def test_each_assignment_keeps_its_own_case_list_in_a_shared_work_dir(self):
        with tempfile.TemporaryDirectory() as tmp:
            kit, work = self.fake_kit(Path(tmp) / "kit"), Path(tmp) / "work"
            students = grade.all_student_files(kit)
            c1, c2 = (grade.cases_cache(work, kit, a, students) for a in (1, 2))
            self.assertNotEqual(c1.name.split("-")[1], c2.name.split("-")[1])  # the key has the assignment
            (kit / "starter/p/a1.cpp").write_text("// a submission\n")    # student files: not in the key
            (kit / "starter/q/a2.cpp").write_text("// another\n")
            self.assertEqual(grade.cases_cache(work, kit, 1, students), c1)
            (work / "cases").mkdir(parents=True)
            old_format = work / "cases" / ("a" * 32 + ".json")
            old_format.write_text("{}")
            grade.store_cases(c1, {"s.A.b": ["s", "A.b"]}, 1)
            grade.store_cases(c2, {"t.C.d": ["t", "C.d"]}, 2)
            (kit / "starter/q/given.h").write_text("// the kit changed\n")
            c1_new = grade.cases_cache(work, kit, 1, students)
            self.assertNotEqual(c1_new, c1)
            grade.store_cases(c1_new, {"s.A.e": ["s", "A.e"]}, 1)
            self.assertEqual(sorted(p.name for p in (work / "cases").iterdir()), sorted([c1_new.name, c2.name]))

    def test_a_list_read_from_prebuilt_programs_is_listed_again_when_they_are_rebuilt(self):
        # An instructor adds a case to a hidden test and grades with --prebuilt before rebuilding:
        # the list then read from the old programs must not stand for the kit once they are rebuilt.
        with tempfile.TemporaryDirectory() as tmp:
            kit, work = self.fake_kit(Path(tmp) / "kit"), Path(tmp) / "work"
            students = grade.all_student_files(kit)
            program = Path(tmp) / "test_s"
            program.write_bytes(b"old program")
            before = grade.cases_cache(work, kit, 1, students, [program])
            self.assertEqual(grade.cases_cache(work, kit, 1, students, [program]), before)
            self.assertNotEqual(grade.cases_cache(work, kit, 1, students), before)
            program.write_bytes(b"the program rebuilt with one more case")
            self.assertNotEqual(grade.cases_cache(work, kit, 1, students, [program]), before)

    def test_configure_again_when_the_suites_differ_even_by_a_suffix(self):
        calls = []
        real = grade.run
        grade.run = lambda cmd, *a, **k: (calls.append(cmd), (0, ""))[1]
        try:
            with tempfile.TemporaryDirectory() as tmp:
                b = Path(tmp)
                (b / "CMakeCache.txt").write_text("KIT_TEST_SUITES:STRING=pipeline_training\n"
                                                  "CMAKE_CXX_FLAGS_RELEASE:STRING=-O3 -DNDEBUG\n"
                                                  "KIT_PREBUILT:PATH=\n"
                                                  "KIT_PREBUILT_STUBS:STRING=\n"
                                                  f"KIT_REFERENCE_STUBS:PATH={b.parent / 'reference_stubs'}\n")
                grade.build(b, b, 1, 10, [], ["pipeline"])
                grade.build(b, b, 1, 10, [], ["pipeline_training"])
                grade.build(b, b, 1, 10, [], ["pipeline_training"], how=grade.Compile(grade.FAST_OPTIMIZE))
                (b / "CMakeCache.txt").write_text("KIT_TEST_SUITES:STRING=pipeline_training\n"
                                                  "CMAKE_CXX_FLAGS_RELEASE:STRING=-O3 -DNDEBUG\n"
                                                  "KIT_PREBUILT:PATH=\n"
                                                  "KIT_PREBUILT_STUBS:STRING=\n"
                                                  f"KIT_REFERENCE_STUBS:PATH={b.parent / 'reference_stubs'}\n")
                grade.build(b, b, 1, 10, [], ["pipeline_training"], how=grade.Compile(prebuilt="/main/build", stubs=("zero/zero_step.cpp", "collectives/ring.cpp")))
        finally:
            grade.run = real
        configures = [c for c in calls if "-S" in c]
        self.assertEqual(len(configures), 3)  # the suffix, the other optimization level, a prebuilt tree
        self.assertIn("-DKIT_TEST_SUITES:STRING=pipeline", configures[0])
        self.assertIn("-DCMAKE_CXX_FLAGS_RELEASE:STRING=-O1 -DNDEBUG", configures[1])
        self.assertIn("-DKIT_PREBUILT:PATH=/main/build", configures[2])
        self.assertIn("-DKIT_PREBUILT_STUBS:STRING=collectives/ring.cpp;zero/zero_step.cpp", configures[2])
        self.assertEqual([c[-1] for c in calls if "--build" in c],
                         ["test_pipeline", "test_pipeline_training", "test_pipeline_training",
                          "test_pipeline_training"])


    def test_the_graders_own_checks_grade_at_o1_with_their_items_and_the_prebuilt_objects(self):
        argv = grade.check_argv(Path("sub"), Path("w"), Path("o.json"), 2, 3, ["Problem 7.2"], 30, "/main/build")
        self.assertEqual(argv[:9], ["sub", "--assignment", "3", "--work", "w", "--out", "o.json", "--jobs", "2"])
        for flags in (["--fast-compile"], ["--items", "Problem 7.2"], ["--test-timeout", "30"],
                      ["--prebuilt", "/main/build"]):
            self.assertIn(flags, [argv[i:i + len(flags)] for i in range(len(argv))])
        self.assertNotIn("--prebuilt", grade.check_argv(Path("sub"), Path("w"), Path("o"), 1))


class LocalGrade(unittest.TestCase):
    """grade.py --local BUILD: a student's own build, graded on the public cases."""

    def test_hidden_patterns_are_those_of_hidden_cases_only(self):
        rubric = {"items": [{"tests": ["s.A.*", "s.HiddenA.*"]}, {"tests": ["s.B.*"]}]}
        self.assertEqual(grade.hidden_patterns(rubric, {"s.A.x": 0, "s.B.y": 0}), ["s.HiddenA.*"])
        # a public pattern that matches nothing is not "hidden": grade_local reports it as an error
        self.assertEqual(grade.hidden_patterns(rubric, {"s.A.x": 0}), ["s.HiddenA.*"])

    def test_a_directory_that_is_no_build_of_this_tree_is_a_clear_error(self):
        with tempfile.TemporaryDirectory() as tmp:
            with self.assertRaisesRegex(RuntimeError, "not a build of this kit: configure and build first"):
                grade.grade_local(Path(tmp), 1)
            (Path(tmp) / "CMakeCache.txt").write_text("CMAKE_HOME_DIRECTORY:INTERNAL=/elsewhere\n")
            with self.assertRaisesRegex(RuntimeError, "a build of /elsewhere, not of"):
                grade.grade_local(Path(tmp), 1)
            (Path(tmp) / "CMakeCache.txt").write_text(f"CMAKE_HOME_DIRECTORY:INTERNAL={grade.KIT}\n"
                                                      "KIT_SOLUTION:BOOL=ON\n")
            with self.assertRaisesRegex(RuntimeError, "KIT_SOLUTION=ON"):
                grade.grade_local(Path(tmp), 1)

    def test_local_takes_no_submission_and_no_work_dir(self):
        for argv in (["sub", "--local", "build"], ["--local", "build", "--work", "/tmp/w"], []):
            with self.assertRaises(SystemExit), redirect_stderr(io.StringIO()):
                grade.main(argv)

    def test_a_local_grade_prints_why_each_item_lost_points(self):
        item = ("3/5 test cases passed\n\nFAILED s.A.one\nfile.cpp:1: Failure\nexpected 2, got 3\n\n 1 FAILED TEST\n"
                "---- the code under test (the subject process, which exited with status 0): its output ----\n"
                "student noise\nFAILED s.A.two\n" + "\n".join(f"line {i}" for i in range(10)) + "\n")
        reasons = grade.failed_reasons(item, lines=6, cases=3)
        self.assertEqual(reasons[:3], ["FAILED s.A.one", "    file.cpp:1: Failure", "    expected 2, got 3"])
        self.assertNotIn("student noise", "\n".join(reasons), "the subject's own output is not a reason")
        self.assertNotIn("1 FAILED TEST", "\n".join(reasons))
        self.assertEqual(reasons[3:], ["FAILED s.A.two"] + [f"    line {i}" for i in range(6)] + ["    ..."])
        self.assertEqual(grade.failed_reasons("".join(f"FAILED s.{i}\nwhy\n" for i in range(5)), cases=3)[-1],
                         "... and 2 more failed cases")
        self.assertEqual(grade.failed_reasons("starter/x.cpp: #include <regex> is outside the allowed set"),
                         ["starter/x.cpp: #include <regex> is outside the allowed set"])
        results = {"tests": [{"name": "P1", "score": 3, "max_score": 5, "output": item},
                             {"name": "P2", "score": 5, "max_score": 5, "output": "FAILED never shown\n"}]}
        out = io.StringIO()
        grade.print_reasons(results, out)
        self.assertIn("== P1: 3 / 5", out.getvalue())
        self.assertIn("expected 2, got 3", out.getvalue())
        self.assertNotIn("P2", out.getvalue())

    def test_problem_1s_include_restriction_allows_the_common_containers_and_the_handout_lists_it(self):
        rubric = grade.load_rubric(KIT, 1)
        with tempfile.TemporaryDirectory() as tmp:
            f = Path(tmp) / "dataset.cpp"
            f.write_text("#include <unordered_set>\n#include <map>\n#include <thread>\n#include \"dist/dist.h\"\n"
                         "void g() { std::thread t; }\n")
            problems = grade.check_restrictions({"data_parallel/dataset.cpp": f}, rubric)
        self.assertEqual(len([p for p in problems if "#include" in p]), 1, problems)
        self.assertIn("#include <thread> is outside the allowed set", problems[0])
        self.assertTrue(any("uses std::thread" in p for p in problems), problems)
        # The handout states the list where it states the restriction: the same list.
        handout = (KIT / "handout" / "assignment1.md").read_text()
        section = handout[handout.index("The includes allowed:"):handout.index("A finding there costs")]
        listed = set(re.findall(r"`<?([\w/.]+)>?`", section))
        self.assertEqual(listed, set(rubric["restrictions"]["allowed_includes"]))

    def test_build_only_exits_1_when_the_kit_does_not_build(self):
        def no_build(*a, **kw):
            raise RuntimeError("the kit with its starter stubs does not build:\n(compiler output)")
        saved = grade.grade
        grade.grade = no_build
        try:
            with tempfile.TemporaryDirectory() as tmp, redirect_stdout(io.StringIO()):
                out = Path(tmp) / "r.json"
                rc = grade.main([str(KIT), "--build-only", "--work", tmp, "--out", str(out)])
                self.assertEqual(rc, 1)
                self.assertIn("does not build", json.loads(out.read_text())["output"])
        finally:
            grade.grade = saved


class Run(unittest.TestCase):
    def test_a_process_outside_the_group_holding_the_output_cannot_hang_the_grader(self):
        marker = f"kit-grader-unit-{os.getpid()}-hold"
        t0 = time.time()
        rc, out = grade.run(["sh", "-c", f"setsid sh -c 'exec -a {marker} sleep 30' & sleep 60"], KIT, 1, [])
        self.assertLess(time.time() - t0, 10)
        self.assertIn("stopped after 1 s", out)
        for pid in processes_with(marker):
            os.kill(pid, 9)


class StaticChecks(unittest.TestCase):
    def findings(self, text):
        with tempfile.TemporaryDirectory() as tmp:
            f = Path(tmp) / "pipe.cpp"
            f.write_text(text)
            return grade.static_findings({"pipeline/pipe.cpp": f}, RUBRIC)

    def test_each_kind_of_call_is_reported_with_its_line(self):
        src = "\n".join([
            "#include <fstream>",
            "void a() { std::exit(0); }",
            "void b() { fork(); }",
            "const char* c = std::getenv(\"X\");",
            "std::ifstream d(\"/proc/self/cmdline\");",
            "int e = ::_exit\\",
            "(1);",
        ])
        whats = {(n, what) for _, n, what, _ in self.findings(src)}
        self.assertIn((2, "ends the process"), whats)
        self.assertIn((3, "starts processes"), whats)
        self.assertIn((4, "reads the environment or argv"), whats)
        self.assertIn((5, "opens files or file descriptors"), whats)
        self.assertIn((5, "names /proc, /dev or a report file"), whats)
        self.assertIn(6, {n for n, what in whats if what == "ends the process"})  # a name split by a backslash

    def test_comments_strings_and_members_are_not_calls(self):
        src = ("// exit(0) fork()\n/* abort() */\nconst char* s = \"exit(1)\";\n"
               "void f(Q& q) { q.exit(); q->write(1); }\n")
        self.assertEqual(self.findings(src), [])

    def test_the_reference_solution_has_no_finding(self):
        found = {f: KIT / "solution" / f for f in RUBRIC["student_files"]}
        self.assertEqual(grade.static_findings(found, RUBRIC), [])

    def test_the_item_is_visible_and_worth_zero(self):
        with tempfile.TemporaryDirectory() as tmp:
            f = Path(tmp) / "pipe.cpp"
            f.write_text("void a() { std::abort(); }\n")
            item, zeroed = grade.static_item({"pipeline/pipe.cpp": f}, RUBRIC, 9)
        self.assertEqual((item["max_score"], item["visibility"], item["status"]), (0, "visible", "failed"))
        self.assertIn("pipeline/pipe.cpp:1: ends the process", item["output"])
        self.assertEqual(zeroed, set())  # the shipped rubric flags; "zero" is the instructor's choice


class SymbolCheck(unittest.TestCase):
    """grader/symbols.py on small objects compiled here (g++ -c, no LibTorch: a second each)."""

    @classmethod
    def setUpClass(cls):
        cls.dir = Path(tempfile.mkdtemp())

    def compile(self, name, code):
        src, obj = self.dir / f"{name}.cpp", self.dir / f"{name}.o"
        src.write_text(code)
        subprocess.run(["c++", "-std=c++17", "-O1", "-fPIC", "-c", str(src), "-o", str(obj)], check=True)
        return obj, src

    def findings(self, name, code, given=None):
        obj, src = self.compile(name, code)
        return symbols.findings_of(obj, src, given)

    def assertFinds(self, name, code, *needles):
        found = self.findings(name, code)
        text = "\n".join(f"{l}: {s}: {w}" for l, s, w in found)
        for n in needles:
            self.assertIn(n, text)
        return found

    def test_what_a_fair_solution_uses_is_allowed(self):
        code = ("#include <algorithm>\n#include <cmath>\n#include <cstdio>\n#include <iostream>\n#include <map>\n"
                "#include <memory>\n#include <mutex>\n#include <sstream>\n#include <stdexcept>\n#include <string>\n"
                "#include <thread>\n#include <vector>\n#include <cassert>\n"
                "namespace kit { double f(std::vector<double> v, int n) {\n"
                "  static std::mutex mu; std::lock_guard<std::mutex> lock(mu);\n"
                "  std::sort(v.begin(), v.end()); std::ostringstream os; os << v.size(); std::cout << os.str() << std::endl;\n"
                "  std::printf(\"%d\\n\", n); std::fprintf(stderr, \"x\\n\"); assert(n >= 0);\n"
                "  std::map<std::string, int> m; m[\"a\"] = 1; auto p = std::make_shared<int>(3);\n"
                "  double s = 0; std::thread t([&] { s = std::sqrt(v[0]) + std::exp(v[0]) + std::pow(2.0, n); }); t.join();\n"
                "  if (n > 9) throw std::runtime_error(\"n\");\n"
                "  return s + *p + std::log1p(v.back()) + std::tanh(1.0f); } }\n")
        self.assertEqual(self.findings("fair", code), [])

    def test_descriptors_and_files_are_found_however_spelt(self):
        found = self.assertFinds("fds", "#include <fcntl.h>\n#include <sys/uio.h>\n#include <unistd.h>\n"
                                 "namespace kit { void f(int fd) { char b[8]; auto r = ::read; (void)!r(fd, b, 8);\n"
                                 "  iovec v{b, 8}; (void)!writev(fd + 1, &v, 1); (void)fcntl(fd, F_GETFL); } }\n",
                                 "read", "writev", "fcntl")
        self.assertTrue(all("reads or writes" in w or "descriptor" in w for _, s, w in found if s in ("read", "writev")))

    def test_exit_through_a_pointer_and_memory_probing_are_found(self):
        self.assertFinds("probe", "#include <cstdlib>\n#include <malloc.h>\n#include <unistd.h>\n"
                         "extern char __bss_start;\n"
                         "namespace kit { long f() { void (*volatile q)(int) = std::_Exit; struct mallinfo2 mi = mallinfo2();\n"
                         "  if (mi.arena == 7) q(0); return (char*)sbrk(0) - &__bss_start; } }\n",
                         "_Exit", "mallinfo2", "sbrk", "__bss_start")

    def test_file_streams_the_file_system_and_gtest_are_found(self):
        self.assertFinds("streams", "#include <filesystem>\n#include <fstream>\n"
                         "namespace testing { struct UnitTest { static UnitTest* GetInstance(); }; }\n"
                         "namespace kit { int f() { std::ifstream in(\"/proc/self/fd/3\"); std::string s; in >> s;\n"
                         "  return (int)s.size() + std::filesystem::exists(\"x\") + (testing::UnitTest::GetInstance() != nullptr); } }\n",
                         "basic_ifstream", "filesystem", "testing::UnitTest::GetInstance")

    def test_definitions_that_would_replace_library_code_are_found(self):
        self.assertFinds("defs", "#include <cstddef>\n#include <new>\n#include <cstdlib>\n"
                         "extern \"C\" long write(int, const void*, size_t) { return 0; }\n"
                         "void* operator new(std::size_t n) { return std::malloc(n); }\n"
                         "namespace testing { bool passed() { return true; } }\n",
                         "write", "extern \"C\"", "operator new", "testing::passed", "library's namespace")

    def test_the_measuring_instruments_and_uncounted_memory_are_found(self):
        # A step that resets the peak the test reads, or the message counters, or that holds a
        # tensor over malloc'd memory (from_blob makes it through TensorMaker), hides what it did.
        found = self.assertFinds(
            "instruments", "#include <cstdint>\n#include <cstdlib>\n"
            "namespace at { struct TensorMaker { void make_tensor(); }; }\n"
            "namespace kit::memory { void reset_cpu_peak(); int64_t cpu_bytes_peak(); }\n"
            "namespace kit::dist { void reset_counters(); struct Group { void reset_counters() const; }; }\n"
            "namespace kit::pp { void reset_recompute_counters(); }\n"
            "namespace kit { int64_t step(const dist::Group& g, at::TensorMaker& m) {\n"
            "  m.make_tensor(); memory::reset_cpu_peak(); dist::reset_counters(); g.reset_counters();\n"
            "  pp::reset_recompute_counters(); return memory::cpu_bytes_peak(); } }\n",
            "kit::memory::reset_cpu_peak()", "kit::memory::cpu_bytes_peak()", "kit::dist::reset_counters()",
            "kit::dist::Group::reset_counters() const", "kit::pp::reset_recompute_counters()",
            "at::TensorMaker::make_tensor()")
        self.assertEqual(len(found), 6, found)
        self.assertTrue(all("measuring instruments" in w for _, s, w in found if s.startswith("kit::")), found)
        self.assertTrue(any("counting allocator never sees" in w for _, s, w in found if s.startswith("at::")), found)

    def test_a_helper_at_file_scope_is_not_a_finding(self):
        self.assertEqual(self.findings("helper", "static int a(int x) { return x; }\nint helper(int x) { return a(x) + 1; }\n"
                                       "namespace { int b() { return 2; } }\nnamespace kit { int g() { return helper(b()); } }\n"), [])

    def test_a_system_call_instruction_is_found(self):
        found = self.findings("asm", "namespace kit { long f() { long r; asm volatile(\"syscall\" : \"=a\"(r) : \"a\"(39) "
                                     ": \"rcx\", \"r11\", \"memory\"); return r; } }\n")
        self.assertTrue(any("system call instruction" in w for _, _, w in found), found)

    def test_given_code_that_touches_files_is_denied_and_redefinitions_are_found(self):
        io_obj, _ = self.compile("given_io", "#include <cstdio>\n#include <string>\n"
                                 "namespace kit { int load_thing(const std::string& p) { FILE* f = std::fopen(p.c_str(), \"r\");\n"
                                 "  return f ? std::fgetc(f) : -1; } }\n")
        given_obj, _ = self.compile("given", "namespace kit { int add(int a, int b) { return a + b; } }\n")
        given = symbols.GivenCode([io_obj, given_obj])
        found = self.findings("student", "#include <string>\nnamespace kit { int load_thing(const std::string& p);\n"
                                         "int add(int a, int b);\n"
                                         "int f() { return load_thing(\"/proc/self/fd/3\") + add(1, 2); } }\n", given)
        self.assertEqual([s for _, s, _ in found], ["kit::load_thing(std::__cxx11::basic_string<char, std::char_traits<char>, "
                                                     "std::allocator<char> > const&)"])
        self.assertIn("given code that the rules deny (given_io.o calls f", found[0][2])
        found = self.findings("redefines", "namespace kit { int add(int a, int b) { return a - b; } }\n", given)
        self.assertIn("given or test code also defines", found[0][2])

    def test_the_line_is_where_the_name_appears(self):
        found = self.findings("line", "#include <unistd.h>\n\nnamespace kit {\n// write( in a comment\n"
                                      "void f(int fd) { (void)!::write(fd, \"x\", 1); } }\n")
        self.assertEqual([(l, s) for l, s, _ in found], [(5, "write")])


class Mutants(unittest.TestCase):
    """grader/mutate.py's mutant generation (grading a mutant is the CI smoke run's)."""

    def rules(self, code):
        return {(r, new) for r, new in mutate.line_mutants(code)}

    def test_a_finished_runs_log_gives_its_results_again(self):
        ms = [{"id": "aa11"}, {"id": "bb22"}, {"id": "cc33"}]
        log = ("[1/3 40 s] killed       aa11 f: x  ->  y  {}\n[2/3 70 s] not compiled bb22 f: x  ->  y  {}\n"
               "noise\n[3/3 99 s] survived     cc33 g: x  ->  y  {}\n")
        results, seconds = mutate.results_from_log(ms, log)
        self.assertEqual([st for _, st in results], ["killed", "not compiled", "survived"])
        self.assertEqual(seconds, 99)
        with self.assertRaisesRegex(SystemExit, "no status for 1 of the 4"):
            mutate.results_from_log(ms + [{"id": "dd44"}], log)

    def test_equivalent_and_gpu_only_mutants_count_apart_from_the_score(self):
        def m(i):
            return {"id": i, "problem": "P", "function": "f", "file": "x.cpp", "line": 1, "rule": "r",
                    "old": "a", "new": "b"}
        with tempfile.TemporaryDirectory() as d:
            eq, gpu = Path(d) / "eq.json", Path(d) / "gpu.json"
            eq.write_text(json.dumps({"e1": "same behaviour"}))
            gpu.write_text(json.dumps({"g1": "a CUDA branch"}))
            saved = mutate.EQUIVALENT, mutate.NEEDS_GPU
            mutate.EQUIVALENT, mutate.NEEDS_GPU = eq, gpu
            try:
                text = mutate.report([(m("k1"), "killed"), (m("s1"), "survived"), (m("e1"), "survived"),
                                      (m("g1"), "survived")], 3, 60, "cmd")
            finally:
                mutate.EQUIVALENT, mutate.NEEDS_GPU = saved
        self.assertIn("| P | `f` | 4 | 4 | 1 | 1 | 1 | 1 | 50 % |", text)
        self.assertIn("`s1`", text)  # the one true survivor is listed with its diff
        self.assertNotIn("`g1`", text)

    def test_each_rule_makes_its_change(self):
        got = self.rules("  for (int64_t j = std::max<int64_t>(0, k - m + 1); j <= n; ++j)")
        for want in [("relational", "  for (int64_t j = std::max<int64_t>(0, k - m + 1); j < n; ++j)"),
                     ("arithmetic", "  for (int64_t j = std::max<int64_t>(0, k + m + 1); j <= n; ++j)"),
                     ("constant", "  for (int64_t j = std::max<int64_t>(1, k - m + 1); j <= n; ++j)"),
                     ("min-max", "  for (int64_t j = std::min<int64_t>(0, k - m + 1); j <= n; ++j)")]:
            self.assertIn(want, got)
        self.assertIn(("group", "  dist::all_reduce(t, dist::ReduceOp::SUM, dist::world_group());"),
                      self.rules("  dist::all_reduce(t, dist::ReduceOp::SUM, group);"))
        self.assertIn(("group", "  const int n = dist::world_group().size();"), self.rules("  const int n = group.size();"))
        self.assertIn(("transpose", "  x = a[j][i];"), self.rules("  x = a[i][j];"))
        self.assertIn(("scale", "  y = x;"), self.rules("  y = x / n;"))
        self.assertIn(("detach", "  keep = out;"), self.rules("  keep = out.detach();"))
        self.assertIn(("delete", "  ;"), self.rules("  p.grad().div_(world);"))
        self.assertIn(("delete", "  ;"), self.rules("  x = y;"))
        for decl in ("  const int64_t m = 3;", "  torch::nn::Sequential part = parts[k];", "  Clock clock;",
                     "  std::vector<torch::Tensor> out(n);", "  auto t = f();"):
            self.assertNotIn("delete", {r for r, _ in self.rules(decl)}, decl)
        self.assertIn(("swap-args", "  f(b, a);"), self.rules("  f(a, b);"))

    def test_templates_strings_and_comments_are_left_alone(self):
        got = self.rules('  auto v = std::vector<int64_t>{}; throw Error("a < b + 1");')
        self.assertFalse(any(r == "relational" for r, _ in got), got)
        self.assertFalse(any('"a' not in new for r, new in got if r in ("arithmetic", "constant")), got)
        code, comment = mutate.code_part('  x = y + 1;  // y + 1 "quoted"')
        self.assertEqual((code, comment), ("  x = y + 1;  ", '// y + 1 "quoted"'))

    def test_mutants_stay_inside_the_marked_regions_and_name_their_items(self):
        ms = mutate.all_mutants(1, ["clock_cycles"])
        self.assertGreater(len(ms), 10)
        text = (KIT / "solution" / "pipeline" / "pipe.cpp").read_text().splitlines()
        (first, last), = [(a, b) for p, f, a, b in mutate.regions(KIT / "solution" / "pipeline" / "pipe.cpp")
                          if f == "clock_cycles"]
        for m in ms:
            self.assertTrue(first < m["line"] <= last + 1, m)
            self.assertEqual(text[m["line"] - 1], m["old"])
        self.assertEqual(mutate.items_for(RUBRIC, ms[0]), ["Problem 2.1 clock_cycles"])
        self.assertEqual(len({m["id"] for m in ms}), len(ms))

    def test_sampling_is_reproducible_and_bounded(self):
        ms = mutate.all_mutants(1)
        a, b = mutate.sample(ms, 3, 7), mutate.sample(ms, 3, 7)
        self.assertEqual([m["id"] for m in a], [m["id"] for m in b])
        per = {}
        for m in a:
            per[m["function"]] = per.get(m["function"], 0) + 1
        self.assertLessEqual(max(per.values()), 3)

    def test_sampling_covers_every_rule_class_before_repeating_one(self):
        ms = mutate.all_mutants(1)
        for per_function in (2, 8, 20):
            picked = mutate.sample(ms, per_function, 3)
            for fn in {m["function"] for m in ms}:
                rules = {m["rule"] for m in ms if m["function"] == fn}
                got = [m["rule"] for m in picked if m["function"] == fn]
                counts = {r: got.count(r) for r in rules}
                available = {r: sum(1 for m in ms if m["function"] == fn and m["rule"] == r) for r in rules}
                # no class twice while another class (that has mutants left) has none
                if max(counts.values()) > 1:
                    self.assertTrue(all(counts[r] >= 1 or available[r] == 0 for r in rules), (fn, counts))
        # a small sample draws its classes at random, not the alphabet's first ones
        for fn in {m["function"] for m in ms}:
            if len({m["rule"] for m in ms if m["function"] == fn}) >= 3:
                firsts = {m["rule"] for seed in range(8) for m in mutate.sample(ms, 1, seed) if m["function"] == fn}
                self.assertGreater(len(firsts), 1, fn)

    def test_the_report_counts_and_shows_survivors(self):
        ms = mutate.all_mutants(1, ["clock_cycles"])[:4]
        text = mutate.report([(ms[0], "killed"), (ms[1], "survived"), (ms[2], "not compiled"), (ms[3], "killed")],
                             1, 60, "python3 grader/mutate.py run")
        self.assertIn("| 2.1 | `clock_cycles` | 4 | 3 | 2 | 1 | 0 | 0 | 67 % |", text)
        self.assertIn(ms[1]["id"], text)


class Verdicts(unittest.TestCase):
    def r(self, records, exit=0, timed_out=False):
        return {"records": records, "output": "", "exit": exit, "timed_out": timed_out}

    def test_only_a_pass_and_an_end_pass(self):
        self.assertEqual(grade.case_verdict(self.r([("PASS", "A.b"), ("END", "1")]), "A.b", False, 9)[0], "pass")
        self.assertEqual(grade.case_verdict(self.r([("PASS", "A.b")]), "A.b", False, 9)[0], "fail")
        self.assertEqual(grade.case_verdict(self.r([("END", "1")]), "A.b", False, 9)[0], "fail")
        self.assertEqual(grade.case_verdict(self.r([]), "A.b", False, 9)[0], "fail")
        self.assertEqual(grade.case_verdict(self.r([("PASS", "A.c"), ("END", "1")]), "A.b", False, 9)[0], "fail")
        self.assertEqual(grade.case_verdict(self.r([("PASS", "A.b"), ("FAIL", "A.b"), ("END", "1")]),
                                            "A.b", False, 9)[0], "fail")
        self.assertEqual(grade.case_verdict(self.r([("PASS", "A.b"), ("END", "1")], timed_out=True),
                                            "A.b", False, 9)[0], "fail")

    def test_twice_the_lines_or_an_end_first_is_not_a_pass(self):
        for recs in ([("PASS", "A.b"), ("END", "1"), ("PASS", "A.b"), ("END", "1")],
                     [("END", "1"), ("PASS", "A.b")], [("PASS", "A.b"), ("END", "2")],
                     [("PASS", "A.b"), ("PASS", "A.b"), ("END", "1")]):
            self.assertEqual(grade.case_verdict(self.r(recs), "A.b", False, 9)[0], "fail", recs)

    def test_a_failure_line_cannot_be_taken_back(self):
        # "KIT-FAILURE" is written the moment an assertion fails: a later PASS (gtest's state
        # changed in memory) does not undo it.
        v = grade.case_verdict(self.r([("FAILURE", "A.b"), ("PASS", "A.b"), ("END", "1")]), "A.b", False, 9)
        self.assertEqual(v[0], "fail")

    def test_any_line_the_kit_never_writes_voids_the_run(self):
        v = grade.case_verdict(self.r([("FOREIGN", "hello"), ("PASS", "A.b"), ("END", "1")]), "A.b", False, 9)
        self.assertEqual(v[0], "fail")
        self.assertIn("never writes", v[1])

    def test_a_crash_after_the_case_is_named(self):
        v = grade.case_verdict(self.r([("PASS", "A.b")], exit=-11), "A.b", False, 9)
        self.assertEqual(v[0], "fail")
        self.assertIn("before GoogleTest finished", v[1])

    def test_a_skip_counts_only_where_the_rubric_allows_it(self):
        rec = self.r([("SKIP", "A.b"), ("END", "1")])
        self.assertEqual(grade.case_verdict(rec, "A.b", True, 9)[0], "skip")
        self.assertEqual(grade.case_verdict(rec, "A.b", False, 9)[0], "fail")


def case_frame(name, status="exited with status 0", stopped=b"0", records=b""):
    """A subject batch's case frame (tests/judge/batch.h)."""
    body = b"".join(len(f).to_bytes(8, "little") + f for f in (name.encode(), status.encode(), stopped, records))
    return b"CAS" + len(body).to_bytes(8, "little") + body


class Batches(unittest.TestCase):
    """Cases in batches (tests/judge/batch.h): what the grader reads of a batch's frames,
    output and verdict lines, and that whatever it cannot read runs again on its own."""

    def test_frames_give_each_case_its_records_and_how_it_ended(self):
        data = case_frame("A.b", records=b"KIT-RECORDS 1\n") + case_frame("A.c", "was stopped after 3 s", b"1")
        got = grade.parse_case_frames(data, ["A.b", "A.c"])
        self.assertEqual(got["A.b"], ("exited with status 0", False, b"KIT-RECORDS 1\n"))
        self.assertEqual(got["A.c"], ("was stopped after 3 s", True, b""))

    def test_reading_stops_at_the_first_thing_that_is_not_a_whole_frame(self):
        whole = case_frame("A.b")
        for tail in (case_frame("A.c")[:-1], b"garbage" + case_frame("A.c"), case_frame("A.c", stopped=b"2")):
            self.assertEqual(sorted(grade.parse_case_frames(whole + tail, ["A.b", "A.c"])), ["A.b"], tail)
        # a field longer than its frame, and a frame with a fifth field
        body = (99).to_bytes(8, "little") + b"A.c"
        bad = b"CAS" + len(body).to_bytes(8, "little") + body
        self.assertEqual(sorted(grade.parse_case_frames(whole + bad, ["A.b", "A.c"])), ["A.b"])
        extra = case_frame("A.c")[11:] + (0).to_bytes(8, "little")
        self.assertEqual(sorted(grade.parse_case_frames(whole + b"CAS" + len(extra).to_bytes(8, "little") + extra,
                                                        ["A.b", "A.c"])), ["A.b"])

    def test_a_frame_for_a_case_not_in_the_batch_is_ignored(self):
        self.assertEqual(grade.parse_case_frames(case_frame("X.y"), ["A.b"]), {})

    def test_batches_cover_every_case_once_spread_over_the_jobs(self):
        names = [f"S.c{k}" for k in range(50)]
        batches = grade.case_batches({"s": names, "t": ["T.a"]}, 2)
        self.assertEqual(sorted(n for _, b in batches for n in b), sorted(names + ["T.a"]))
        self.assertTrue(all(len(b) <= grade.BATCH_CASES for _, b in batches))
        self.assertEqual(len([b for s, b in batches if s == "s"]), 3)
        self.assertEqual(len(grade.case_batches({"s": names[:3]}, 2)), 2)

    def test_output_is_split_at_each_cases_marker(self):
        text = "banner\n[ RUN      ] A.b\none\n[ RUN      ] A.c\ntwo\n"
        self.assertEqual(grade.split_output(text, "[ RUN      ] ", {"A.b", "A.c"}), {"A.b": "one\n", "A.c": "two\n"})

    def r(self, records, timed_out=False):
        return {"records": records, "output": "", "exit": 0, "timed_out": timed_out}

    def test_each_case_needs_its_own_verdict_line(self):
        recs = [("PASS", "A.b"), ("FAILURE", "A.c"), ("PASS", "A.c"), ("FAIL", "A.d"), ("PASS", "A.e"),
                ("PASS", "A.e"), ("SKIP", "A.g"), ("SKIP", "A.h"), ("END", "7")]
        got = grade.batch_verdicts(self.r(recs), ["A.b", "A.c", "A.d", "A.e", "A.f", "A.g", "A.h"],
                                   lambda n: n == "A.g", {})
        self.assertEqual({n: v for n, (v, _) in got.items()},
                         {"A.b": "pass", "A.c": "fail", "A.d": "fail", "A.g": "skip", "A.h": "fail"})
        # A.e (two lines) and A.f (none) are left to be judged again on their own

    def test_a_foreign_line_or_a_stopped_judge_settles_nothing(self):
        self.assertEqual(grade.batch_verdicts(self.r([("PASS", "A.b"), ("FOREIGN", "x")]), ["A.b"], bool, {}), {})
        self.assertEqual(grade.batch_verdicts(self.r([("PASS", "A.b"), ("TAKEN", "")]), ["A.b"], bool, {}), {})
        self.assertEqual(grade.batch_verdicts(self.r([("PASS", "A.b")], timed_out=True), ["A.b"], bool, {}), {})

    def test_a_stopped_subject_fails_its_case_whatever_the_judge_said(self):
        v = grade.with_subject("pass", "", {"status": "was stopped after 3 s", "stopped": True, "output": ""}, 3)
        self.assertEqual(v[0], "fail")
        self.assertIn("timeout", v[1])


# The kit's main() in a few lines of Python: the token copied with tee(2), never read. (The
# system's interpreter: the sandbox users may not reach one in root's home.)
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
HONEST = (PY + " -c \"import ctypes, os\n"
          "libc = ctypes.CDLL(None, use_errno=True)\n"
          "t, v = map(int, os.environ['KIT_GRADER_CHANNEL'].split(':'))\n"
          "for what in (b' PASS A.b', b' END 1'):\n"
          "    os.write(v, b'KIT-VERDICT '); assert libc.tee(t, v, 256, 0) == 32; os.write(v, what + b'\\\\n')\n\"")


class WithoutNamespaces(unittest.TestCase):
    """Where unshare cannot make a PID namespace (a chroot; a container without the privilege,
    as Gradescope's may be), the sandbox kills the grader's orphaned children instead. That
    sweep must never take a case another slot has just started."""

    def test_two_slots_never_kill_each_others_cases(self):
        script = (
            "import concurrent.futures, sys, tempfile\n"
            f"sys.path.insert(0, {str(KIT / 'grader')!r})\n"
            "import sandbox\n"
            "sandbox._works = lambda cmd: False  # as on a machine without namespaces\n"
            "sb = sandbox.Sandbox(2, separate_users=False)\n"
            "assert not sb.ns\n"
            "d = tempfile.mkdtemp()\n"
            "one = lambda i: sb.run(['sh', '-c', 'sleep 0.02; exit 3'], d, 20, channel=False)['exit']\n"
            "with concurrent.futures.ThreadPoolExecutor(2) as pool:\n"
            "    codes = list(pool.map(one, range(120)))\n"
            "print('EXITS', sorted(set(codes)), codes.count(3))\n")
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        # every case ended by itself (exit 3), none killed (-9) by the other slot's sweep
        self.assertIn("EXITS [3] 120", r.stdout, r.stdout + r.stderr)


class Sandboxed(unittest.TestCase):
    """The sandbox with a shell script as the 'test program' (no build needed)."""

    def setUp(self):
        self.sb = sandbox.Sandbox(1)
        self.dir = Path(tempfile.mkdtemp())
        os.chmod(self.dir, 0o755)

    @unittest.skipUnless(os.geteuid() == 0, "sandbox users need root")
    def test_two_gradings_at_once_get_sandbox_users_of_their_own(self):
        # Each grading kills every process of its users after each case: two side by side on one
        # range would stop each other's cases. The locks' folder is root's alone: one a sandbox
        # user made first (it can write /tmp) is put aside.
        folder = Path(tempfile.mkdtemp(prefix="kit-locks-", dir="/tmp"))
        os.chown(folder, 65007, 65007)
        os.chmod(folder, 0o777)
        child = ("import sys; sys.path.insert(0, sys.argv[1]); import sandbox; sandbox.LOCK_DIR = sys.argv[2]\n"
                 "print(sandbox.Sandbox(2).uid0, flush=True); sys.stdin.read()")
        env = dict(os.environ, KIT_GRADER_SANDBOX_UID="65000")
        procs = [subprocess.Popen([sys.executable, "-c", child, str(Path(sandbox.__file__).parent), str(folder)],
                                  env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(2)]
        try:
            firsts = sorted(int(p.stdout.readline()) for p in procs)
        finally:
            for p in procs:
                p.communicate("")
        self.assertEqual(firsts, [65000, 65000 + sandbox.USERS_STEP])
        st = folder.stat()
        self.assertEqual((st.st_uid, st.st_mode & 0o777), (0, 0o700), "the sandbox user's folder was put aside")
        for d in [folder] + list(Path("/tmp").glob(folder.name + ".not-ours-*")):
            shutil.rmtree(d, ignore_errors=True)

    def test_lines_without_the_token_count_for_nothing(self):
        script = ("echo '[       OK ] A.b'; echo '[  PASSED  ] 1 test.';"
                  "fd=${KIT_GRADER_CHANNEL#*:}; echo 'KIT-VERDICT 0123 PASS A.b' >&$fd; exit 0")
        r = self.sb.run(["sh", "-c", script], self.dir, 20)
        self.assertEqual(r["records"], [("FOREIGN", "KIT-VERDICT 0123 PASS A.b")])
        self.assertEqual(grade.case_verdict(r, "A.b", False, 20)[0], "fail")

    def test_the_token_copied_with_tee_makes_a_signed_line_that_counts(self):
        r = self.sb.run(["sh", "-c", HONEST], self.dir, 20)
        self.assertEqual(r["records"], [("PASS", "A.b"), ("END", "1")], r["output"])
        self.assertEqual(grade.case_verdict(r, "A.b", False, 20)[0], "pass")

    def test_a_token_read_out_of_its_pipe_voids_the_run(self):
        # Whoever read() the token is not the kit (it copies it with tee): the lines it signs count
        # for nothing, however well formed.
        script = ("t=${KIT_GRADER_CHANNEL%:*}; fd=${KIT_GRADER_CHANNEL#*:};"
                  "read -r -n 32 tok <&$t; echo \"KIT-VERDICT $tok PASS A.b\" >&$fd; echo \"KIT-VERDICT $tok END 1\" >&$fd")
        r = self.sb.run(["bash", "-c", script], self.dir, 20)
        self.assertEqual(grade.case_verdict(r, "A.b", False, 20)[0], "fail")
        self.assertIn(("TAKEN", ""), r["records"])
        self.assertIn("taken out of its pipe", grade.case_verdict(r, "A.b", False, 20)[1])

    def test_an_extra_line_beside_the_honest_ones_voids_the_run(self):
        r = self.sb.run(["sh", "-c", HONEST + "; echo 'KIT-VERDICT x PASS A.b' >&${KIT_GRADER_CHANNEL#*:}"],
                        self.dir, 20)
        self.assertEqual(grade.case_verdict(r, "A.b", False, 20)[0], "fail")

    def test_nothing_the_case_started_survives_it(self):
        marker = f"kit-grader-unit-{os.getpid()}-left"
        script = (f"(setsid sh -c 'exec -a {marker} sleep 300' &); "
                  f"(sh -c '(exec -a {marker} sleep 300 &)' &); sleep 0.5; exit 0")
        t0 = time.time()
        self.sb.run(["sh", "-c", script], self.dir, 20)
        time.sleep(0.3)
        left = processes_with(marker)
        for pid in left:
            os.kill(pid, 9)
        self.assertEqual(left, [])
        self.assertLess(time.time() - t0, 15)

    def test_a_timeout_stops_the_case(self):
        t0 = time.time()
        r = self.sb.run(["sleep", "60"], self.dir, 1)
        self.assertTrue(r["timed_out"])
        self.assertLess(time.time() - t0, 10)

    @unittest.skipUnless(os.geteuid() == 0, "separate users need root")
    def test_a_case_cannot_write_the_graders_files(self):
        target = self.dir / "results.json"
        target.write_text("mine")
        r = self.sb.run(["sh", "-c", f"echo 100 > {target}"], self.dir, 20)
        self.assertNotEqual(r["exit"], 0)
        self.assertEqual(target.read_text(), "mine")


# A stand-in for perf_worker: the protocol of grader/perf/perf_worker.cpp, its step time and
# parameters chosen by its arguments (--sleep seconds per measurement, --wrong: other parameters).
FAKE_WORKER = r"""#!/usr/bin/env python3
import json, os, sys, time
if "--gemm" in sys.argv:
    print(json.dumps({"gemm_gflops": 10.0}))
    sys.exit(0)
sleep = float(sys.argv[sys.argv.index("--sleep") + 1])
r, w = map(int, os.environ["KIT_PERF_CHANNEL"].split(":"))
inp, out = os.fdopen(r), os.fdopen(w, "w")
params = [1.0] * 8
out.write(json.dumps({"ready": True}) + "\n"); out.flush()
for line in inp:
    if not line.startswith("go"):
        break
    _, k, seed = line.split()
    before = list(params)
    time.sleep(sleep)
    params = [p + (int(seed) % 97 + 1) * 1e-3 * (i + 1) * (2 if "--wrong" in sys.argv else 1) for i, p in enumerate(params)]
    out.write(json.dumps({"done": int(k), "before": before, "after": params}) + "\n"); out.flush()
"""


class SpeedGateRules(unittest.TestCase):
    """perf_gates.py's verdict and the rubrics' optional items, without timing anything."""

    def test_the_shipped_gates_are_off_and_cost_nothing(self):
        gates = [it for it in RUBRIC["items"] if "performance" in it]
        self.assertTrue(gates)
        self.assertTrue(all(it["enabled"] is False for it in gates))
        on = grade.enabled_items(RUBRIC)["items"]
        self.assertFalse([it for it in on if "performance" in it])
        self.assertEqual(sum(it["points"] for it in on), 100)   # Assignment 1 keeps its points
        for a, total in ((2, 260), (3, 140)):
            if a in grade.assignments():
                rubric = grade.load_rubric(assignment=a)
                self.assertEqual(sum(it["points"] for it in grade.enabled_items(rubric)["items"]), total)
        self.assertEqual(len(grade.enabled_items(RUBRIC, perf_gates=True)["items"]), len(RUBRIC["items"]))
        self.assertEqual(set(perf_gates.rubric_thresholds()), set(perf_gates.GATES))

    def test_a_wrong_run_earns_nothing_however_fast(self):
        ok, why = perf_gates.verdict([1.5] * 5, [0, 0, 0.5, 0, 0], bound=1.9, threshold=1.0)
        self.assertFalse(ok)
        self.assertIn("after pair 3", why)

    def test_the_median_decides(self):
        self.assertTrue(perf_gates.verdict([0.5, 1.2, 1.3, 0.4, 1.25], [0] * 5, 1.9, 1.1)[0])
        self.assertFalse(perf_gates.verdict([1.5, 1.0, 1.05, 1.6, 1.0], [0] * 5, 1.9, 1.1)[0])

    def test_faster_than_the_machine_allows_is_not_believed(self):
        ok, why = perf_gates.verdict([2.5] * 5, [0] * 5, bound=1.9, threshold=1.0)
        self.assertFalse(ok)
        self.assertIn("not believed", why)

    def test_parameter_difference_is_relative_to_the_update(self):
        a = {"before": [1.0, 1.0], "after": [1.1, 1.0]}
        self.assertEqual(perf_gates.compare(a, dict(a)), 0)
        self.assertAlmostEqual(perf_gates.compare(a, {"before": [1.0, 1.0], "after": [1.0, 1.0]}), 1.0)

    def test_an_answer_without_finite_parameters_is_an_error_not_a_crash(self):
        good = {"done": 2, "before": [1.0, 2.0], "after": [1.5, 2.5]}
        self.assertIs(perf_gates.check_answer(good, 2, "yours"), good)
        for bad in ({"done": 1, "before": [1.0], "after": [1.0]}, {"done": 2, "before": [None], "after": [1.0]},
                    {"done": 2, "before": [1.0], "after": [float("nan")]}, {"done": 2}, [2], "done"):
            with self.assertRaises(RuntimeError):
                perf_gates.check_answer(bad, 2, "yours")

    def test_the_bound_is_the_smaller_of_scaling_and_ideal(self):
        self.assertAlmostEqual(perf_gates.machine_bound("data_parallel", [10.0], [9.0, 9.0])[0], 1.8)
        self.assertAlmostEqual(perf_gates.machine_bound("pipe", [10.0], [10.0, 10.0])[0], 16 / 9)


class SpeedGateProtocol(unittest.TestCase):
    """The whole gate (sandboxed workers, SIGSTOP between turns, pairs, verdict) with stand-ins."""

    def setUp(self):
        self.dir = Path(tempfile.mkdtemp())
        os.chmod(self.dir, 0o755)
        self.fake = self.dir / "fake_worker"
        self.fake.write_text(FAKE_WORKER)
        os.chmod(self.fake, 0o755)
        self.saved = dict(perf_gates.GATES["data_parallel"])

    def tearDown(self):
        perf_gates.GATES["data_parallel"] = self.saved

    def gate(self, reference_sleep, student_args):
        perf_gates.GATES["data_parallel"] = dict(self.saved, reference=["--sleep", str(reference_sleep)],
                                                 student=student_args)
        return perf_gates.run_gate("data_parallel", self.fake, self.fake, relative=0.5, pairs=3,
                                   scratch=self.dir, seed=7)

    def test_a_faster_correct_run_passes_and_every_pair_is_shown(self):
        r = self.gate(0.3, ["--sleep", "0.18"])
        self.assertTrue(r["passed"], r["output"])
        self.assertEqual(len(r["ratios"]), 3)
        self.assertTrue(all(1.4 < x < 1.9 for x in r["ratios"]), r["ratios"])
        for text in ("pair  order", "   1     AB", "   2     BA", "bound = the smaller = 2.00x", "threshold: 0.5"):
            self.assertIn(text, r["output"])

    def test_a_run_faster_than_the_machine_allows_fails(self):
        r = self.gate(0.3, ["--sleep", "0.1"])   # 3x with a bound of 2x
        self.assertFalse(r["passed"])
        self.assertIn("not believed", r["output"])

    def test_a_fast_wrong_run_fails(self):
        r = self.gate(0.2, ["--sleep", "0.1", "--wrong"])
        self.assertFalse(r["passed"])
        self.assertIn("differ from the reference", r["output"])

    def test_a_worker_that_dies_fails_the_gate_with_its_output(self):
        r = self.gate(0.1, ["--no-such-flag"])
        self.assertFalse(r["passed"])
        self.assertIn("yours", r["output"])
        self.assertIn("ValueError", r["output"])

    def test_a_stopped_worker_does_not_run(self):
        sb = sandbox.Sandbox(1)
        rd, wr = os.pipe()
        h = sb.start(["sh", "-c", f"while :; do echo x >&{wr}; sleep 0.05; done"], self.dir, 0, pass_fds=(wr,))
        os.close(wr)
        os.set_blocking(rd, False)

        def drained():
            time.sleep(0.4)
            try:
                return len(os.read(rd, 1 << 16))
            except BlockingIOError:
                return 0
        self.assertGreater(drained(), 0)
        sb.signal(h, signal.SIGSTOP)
        drained()   # what it wrote before the signal
        self.assertEqual(drained(), 0)
        sb.signal(h, signal.SIGCONT)
        self.assertGreater(drained(), 0)
        sb.finish(h)
        os.close(rd)


if __name__ == "__main__":
    unittest.main()
