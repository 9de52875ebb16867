"""The student bundle holds what students need and nothing of the solution or the grader."""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import package  # noqa: E402


class StudentBundle(unittest.TestCase):
    def setUp(self):
        self.files = package.student_files()

    def test_no_solution_or_grader_internals(self):
        leaked = [f for f in self.files if f.startswith(("solution/", ".ci/"))
                  or (f.startswith("grader/") and f != "grader/rubric.json")]
        self.assertEqual(leaked, [], "the student bundle must not contain these")

    def test_has_what_students_build_with(self):
        for f in ("CMakeLists.txt", "grader/rubric.json", "tests/CMakeLists.txt", "handout/README.md",
                  "scripts/install_deps.sh", "starter/pipeline/pipe.cpp"):
            self.assertIn(f, self.files)


class GradescopeZip(unittest.TestCase):
    def test_no_solution_or_wrong_submissions(self):
        files = package.gradescope_files()
        self.assertIn("grader/grade.py", files)
        self.assertEqual([f for f in files if f.startswith(("solution/", "grader/wrong_submissions/"))], [])

    def test_carries_the_sandbox_and_the_hidden_variants_the_student_bundle_lacks(self):
        files, student = package.gradescope_files(), package.student_files()
        self.assertIn("grader/sandbox.py", files)
        hidden = [f for f in files if f.startswith("grader/hidden_tests/") and f.endswith(".cpp")]
        self.assertTrue(hidden, "the Gradescope zip must carry grader/hidden_tests/")
        self.assertEqual([f for f in hidden if f in student], [])


if __name__ == "__main__":
    unittest.main()
