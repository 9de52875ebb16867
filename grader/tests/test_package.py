"""The student bundle holds what students need and nothing of the solution or the grader;
each assignment's packages hold its own material and no other assignment's."""
import io
import json
import subprocess
import sys
import tempfile
import unittest
import zipfile
from contextlib import redirect_stdout
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import package  # noqa: E402

LATER = [n for n in package.assignments() if n >= 2]


class StudentBundle(unittest.TestCase):
    def setUp(self):
        self.files = package.student_files()

    def test_no_solution_or_grader_internals(self):
        leaked = [f for f in self.files if f.startswith(("solution/", ".ci/"))
                  or (f.startswith("grader/") and f not in (package.SHARED_RUBRIC,) + package.PUBLIC_GRADER_FILES)]
        self.assertEqual(leaked, [], "the student bundle must not contain these")

    def test_has_what_students_build_with(self):
        for f in ("CMakeLists.txt", "grader/assignment1/rubric.json", "tests/CMakeLists.txt", "handout/README.md",
                  "handout/assignment1.md",
                  "scripts/install_deps.sh", "starter/pipeline/pipe.cpp"):
            self.assertIn(f, self.files)


class StudentReadme(unittest.TestCase):
    """The bundle's README.md is the student's, and no Markdown link in the bundle points at a
    file it does not hold (the instructor's README links grader/README.md and every handout)."""

    def bundle_texts(self, n):
        earlier = package.earlier_solutions(n)
        files = package.student_files(n) + [package.BUNDLE_INFO]
        texts = {f: (package.KIT / f).read_text(errors="replace") for f in files if f.endswith(".md")}
        texts["README.md"] = package.student_readme(n, earlier)
        texts["handout/README.md"] = package.handout_index(n)
        return set(files), texts

    def test_every_link_in_a_bundle_resolves_inside_it(self):
        import posixpath
        import re
        for n in package.assignments():
            files, texts = self.bundle_texts(n)
            dirs = {f.rsplit("/", k)[0] for f in files for k in range(1, f.count("/") + 1)}
            broken = []
            for f, text in texts.items():
                for m in re.finditer(r"\]\(([^)\s#]+)(#[^)]*)?\)", text):
                    if re.match(r"[a-z]+:", m.group(1)):
                        continue
                    target = posixpath.normpath(posixpath.join(posixpath.dirname(f), m.group(1))).rstrip("/")
                    if target not in files and target not in dirs:
                        broken.append(f"{f} -> {m.group(1)}")
            self.assertEqual(broken, [], f"assignment {n}'s bundle")

    def test_the_readme_is_the_students(self):
        for n in package.assignments():
            readme = self.bundle_texts(n)[1]["README.md"]
            self.assertIn(f"handout/assignment{n}.md", readme)
            self.assertIn("python3 grader/grade.py --local build", readme)
            for word in ("solution/", "grader/README", "CI", "KIT_SOLUTION", "{", "}"):
                self.assertNotIn(word, readme, f"assignment {n}")


class FigureConfiguration(unittest.TestCase):
    """Assignment 1's figures have one configuration: scripts/main_job.sh's, which the handout and
    plots/README.md write out (their C= line) for every measured command."""

    def test_handout_plots_readme_and_main_job_agree(self):
        import re
        job = (package.KIT / "scripts/main_job.sh").read_text()
        default = {k: re.search(rf"^{k}=\$\{{{k}:-([^}}]+)\}}", job, re.M).group(1)
                   for k in ("PRESET", "EPOCHS", "N_TRAIN", "N_VALID")}
        want = (f'C="--preset {default["PRESET"]} --epochs {default["EPOCHS"]} --n-train {default["N_TRAIN"]} '
                f'--n-valid {default["N_VALID"]} --threads 1"')
        self.assertIn('--threads 1 --no-progress', job)
        for doc in ("handout/assignment1.md", "plots/README.md"):
            text = (package.KIT / doc).read_text()
            lines = [l for l in text.splitlines() if l.startswith("C=")]
            self.assertTrue(lines, doc)
            for l in lines:
                self.assertEqual(l.split("#")[0].strip(), want, doc)
            for cmd in re.findall(r"^\./build/run_(?:data_parallel|pipeline) .*$", text, re.M):
                self.assertIn("$C", cmd, f"{doc}: a measured command outside the configuration")
                flags = cmd.split("#")[0].replace("$C", "").split()
                self.assertIn(" ".join(flags[1:]).replace("  ", " "), job.replace('"${COMMON[@]}" ', "")
                              .replace('"${COMMON[@]}"', ""), f"{doc}: {cmd} is not main_job.sh's")


class PerAssignment(unittest.TestCase):
    def test_assignment_1_bundle_is_the_kit_minus_later_assignments_material(self):
        # What the bundle was before there was a second assignment: everything tracked but
        # solution/, .ci/ and grader/ (except Assignment 1's rubric). Assignment 1's bundle is
        # exactly that, less only what later assignments added as their own.
        before = [f for f in package.tracked_files() if f.split("/", 1)[0] not in ("solution", ".ci")
                  and (not f.startswith("grader/") or f in (package.SHARED_RUBRIC,) + package.PUBLIC_GRADER_FILES)]
        later = tuple(p for n in LATER for p in package.own_material(n, keep_suites=package.suites(1)))
        self.assertEqual(package.student_files(1), [f for f in before if not f.startswith(later)])

    def test_assignment_1_bundle_has_no_assignment_2_material(self):
        files = package.student_files(1)
        self.assertEqual([f for f in files if f.startswith(("tests/pipeline_training/", "grader/assignment2/",
                                                            "handout/assignment2"))], [])
        self.assertIn("tests/pipeline/pipe_test.cpp", files)
        # given code and the stubs of every student file still ship: the programs share them
        self.assertIn("starter/pipeline_training/executor.h", files)
        self.assertIn("starter/pipeline_training/step.cpp", files)

    @unittest.skipUnless(2 in package.assignments(), "no assignment 2 in this kit")
    def test_assignment_2_bundle_has_its_rubric_tests_and_stubs_and_not_assignment_1s_tests(self):
        files = package.student_files(2)
        for f in ("grader/assignment1/rubric.json", "grader/assignment2/rubric.json", "CMakeLists.txt",
                  "starter/pipeline_training/schedules.cpp", "starter/pipeline_training/step.cpp",
                  "starter/pipeline_training/executor.h", "starter/pipeline/pipe.cpp", "handout/README.md",
                  "handout/assignment2.md"):
            self.assertIn(f, files)
        # the handout of each assignment is its own; the index and the common sections are shared
        self.assertNotIn("handout/assignment1.md", files)
        tracked = package.tracked_files()
        self.assertEqual([f for f in tracked if f.startswith("tests/pipeline_training/") and f not in files], [])
        self.assertFalse([f for f in files if f.startswith(("tests/data_parallel/test_", "tests/pipeline/pipe_test",
                                                            "solution/", "grader/assignment1/wrong_submissions/"))])
        self.assertFalse([f for f in files if f.startswith("grader/") and f not in
                          ("grader/assignment1/rubric.json", "grader/assignment2/rubric.json")
                          + package.PUBLIC_GRADER_FILES])
        # the starter files are stubs, as generated from solution/
        self.assertIn("NotImplemented", (package.KIT / "starter/pipeline_training/step.cpp").read_text())

    def test_a_test_helper_a_shipped_suite_includes_stays(self):
        with tempfile.TemporaryDirectory() as tmp:
            kit = Path(tmp)
            for f, text in {"tests/a/x.cpp": '#include "b/util.h"\n', "tests/b/util.h": '#include "more.h"\n',
                            "tests/b/more.h": "", "tests/b/y.cpp": ""}.items():
                (kit / f).parent.mkdir(parents=True, exist_ok=True)
                (kit / f).write_text(text)
            old = (package.KIT, package.assignments, package.own_material, package.suites)
            try:
                package.KIT = kit
                package.assignments = lambda: [1, 2]
                package.suites = lambda n: {1: {"b"}, 2: {"a"}}[n]
                package.own_material = lambda n, keep_suites=(): [f"tests/{s}/" for s in package.suites(n)
                                                                   if s not in keep_suites]
                kept = package.without_other_assignments(["tests/a/x.cpp", "tests/b/util.h", "tests/b/more.h",
                                                          "tests/b/y.cpp"], 2)
            finally:
                package.KIT, package.assignments, package.own_material, package.suites = old
        self.assertEqual(kept, ["tests/a/x.cpp", "tests/b/util.h", "tests/b/more.h"])

    @unittest.skipUnless(2 in package.assignments(), "no assignment 2 in this kit")
    def test_later_bundles_carry_earlier_solutions_unless_told_otherwise(self):
        self.assertEqual(package.earlier_solutions(2), [1])
        self.assertEqual(package.earlier_solutions(2, [1]), [])
        self.assertEqual(package.earlier_solutions(1), [])
        with self.assertRaises(SystemExit):
            package.earlier_solutions(2, [2])  # not an earlier assignment
        replace = package.solutions_of([1])
        self.assertNotIn("starter/pipeline_training/step.cpp", replace)
        # verbatim: byte for byte the file a KIT_SOLUTION build compiled (KIT_PREBUILT reuses it)
        self.assertEqual(replace["starter/pipeline/pipe.cpp"], (package.KIT / "solution/pipeline/pipe.cpp").read_text())
        with tempfile.TemporaryDirectory() as tmp, redirect_stdout(io.StringIO()):
            out, stubs = Path(tmp) / "b.zip", Path(tmp) / "s.zip"
            package.main(["student", "--assignment", "2", "--out", str(out)])
            package.main(["student", "--assignment", "2", "--stubs-of", "1", "--out", str(stubs)])
            with zipfile.ZipFile(out) as z:
                self.assertEqual(z.read("kit/starter/pipeline/pipe.cpp").decode(), replace["starter/pipeline/pipe.cpp"])
                self.assertIn(b"NotImplemented", z.read("kit/starter/pipeline_training/step.cpp"))
                info = json.loads(z.read("kit/grader/bundle.json"))
                self.assertEqual({k: info[k] for k in ("assignment", "solutions_of", "stubs_of")},
                                 {"assignment": 2, "solutions_of": [1], "stubs_of": []})
                self.assertEqual(info["student_files"]["3"], package.rubric(3)["student_files"])
                for f in package.PUBLIC_GRADER_FILES:
                    self.assertIn("kit/" + f, z.namelist())
                self.assertFalse([n for n in z.namelist() if n.startswith("kit/grader/hidden_tests/")])
            with zipfile.ZipFile(stubs) as z:
                self.assertIn(b"NotImplemented", z.read("kit/starter/pipeline/pipe.cpp"))
                self.assertEqual(json.loads(z.read("kit/grader/bundle.json"))["stubs_of"], [1])

    def test_an_assignment_that_does_not_exist_is_an_error_naming_those_that_do(self):
        r = subprocess.run([sys.executable, str(package.KIT / "grader/package.py"), "student", "--assignment", "99",
                            "--list"], capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("there is no assignment 99", r.stderr)
        self.assertIn("1, ", r.stderr + ", ")


class GradescopeZip(unittest.TestCase):
    def test_no_solution_or_wrong_submissions(self):
        for n in package.assignments():
            files = package.gradescope_files(n)
            self.assertIn("grader/grade.py", files)
            self.assertIn("grader/assignment1/rubric.json", files)  # every package: Assignment 1's student files
            self.assertIn(f"grader/assignment{n}/rubric.json", files)
            self.assertEqual([f for f in files if f.startswith("solution/") or "wrong_submissions/" in f], [])

    def test_carries_the_sandbox_and_the_hidden_variants_the_student_bundle_lacks(self):
        files, student = package.gradescope_files(), package.student_files()
        self.assertIn("grader/sandbox.py", files)
        hidden = [f for f in files if f.startswith("grader/hidden_tests/") and f.endswith(".cpp")]
        self.assertTrue(hidden, "the Gradescope zip must carry grader/hidden_tests/")
        self.assertEqual([f for f in hidden if f in student], [])

    def test_each_zip_carries_its_own_rubric_and_hidden_tests_only(self):
        a1 = package.gradescope_files(1)
        self.assertEqual([f for f in a1 if f.startswith("grader/assignment")], ["grader/assignment1/rubric.json"])
        for n in LATER:
            files = package.gradescope_files(n)
            self.assertIn(f"grader/assignment{n}/rubric.json", files)
            mine = package.suites(n)
            hidden = {f.split("/")[2] for f in files if f.startswith("grader/hidden_tests/")}
            self.assertLessEqual(hidden, mine)
            self.assertFalse([f for f in files if f.startswith("grader/assignment") and
                              not f.startswith(f"grader/assignment{n}/") and f != package.SHARED_RUBRIC])

    def test_scripts_pass_the_assignment(self):
        for n in package.assignments():
            with tempfile.TemporaryDirectory() as tmp, redirect_stdout(io.StringIO()):
                out = Path(tmp) / "autograder.zip"
                package.main(["gradescope", "--assignment", str(n), "--out", str(out)])
                with zipfile.ZipFile(out) as z:
                    for script, passes in (("setup.sh", f"autograder_setup.sh {n}\n"),
                                           ("run_autograder", f"--assignment {n} ")):
                        text = z.read(script).decode()
                        self.assertIn(passes, text, script)
                        self.assertEqual(z.getinfo(script).external_attr >> 16, 0o755)
                    # run_autograder configures against the LibTorch setup.sh installed
                    self.assertIn("source /autograder/source/kit/build_env.sh", z.read("run_autograder").decode())
                    self.assertIn("kit/scripts/autograder_setup.sh", z.namelist())
                    self.assertIn("kit/scripts/setup_route.py", z.namelist())
                    self.assertIn("kit/scripts/cuda_toolkit_from_pip.sh", z.namelist())
                    self.assertIn(f"kit/{package.rubric_path(n)}", z.namelist())


if __name__ == "__main__":
    unittest.main()
