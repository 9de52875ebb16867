"""Unit tests of grader/make_starter.py: good blocks become stubs; bad markers are errors."""
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from make_starter import MarkerError, strip_solution  # noqa: E402

HEAD = '#include "kit/errors.h"\n'


class StripSolution(unittest.TestCase):
    def test_block_becomes_stub(self):
        src = HEAD + "int f() {\n  // hint stays\n  // BEGIN SOLUTION 1.2 f\n  return 1;\n  // END SOLUTION\n}\n"
        out = strip_solution(src)
        self.assertIn('  throw kit::NotImplemented("Problem 1.2 f");\n', out)
        self.assertIn("// hint stays", out)
        self.assertNotIn("return 1;", out)

    def assertMarkerError(self, src, words):
        with self.assertRaises(MarkerError) as cm:
            strip_solution(HEAD + src, "x.cpp")
        self.assertIn(words, str(cm.exception))

    def test_nested(self):
        self.assertMarkerError("// BEGIN SOLUTION 1.1 a\n// BEGIN SOLUTION 1.2 b\n// END SOLUTION\n// END SOLUTION\n",
                               "nested")

    def test_unclosed(self):
        self.assertMarkerError("// BEGIN SOLUTION 1.1 a\nint x;\n", "never closed")

    def test_end_without_begin(self):
        self.assertMarkerError("int x;\n// END SOLUTION\n", "without a matching BEGIN")

    def test_leftover_malformed_marker(self):
        self.assertMarkerError("// BEGIN SOLUTION 1.1 a\n// END SOLUTION\n// begin solution\n", "malformed")

    def test_begin_without_label(self):
        self.assertMarkerError("// BEGIN SOLUTION\n// END SOLUTION\n", "needs a problem and a name")

    def test_no_block(self):
        self.assertMarkerError("int x;\n", "no BEGIN SOLUTION block")

    def test_missing_errors_include(self):
        with self.assertRaises(MarkerError):
            strip_solution("// BEGIN SOLUTION 1.1 a\n// END SOLUTION\n", "x.cpp")


if __name__ == "__main__":
    unittest.main()
