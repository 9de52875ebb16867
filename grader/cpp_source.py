"""The C++ source checks: a small lexer (comments and strings out), the includes a student
file makes, and the static checks and implementation restrictions of the rubrics.
"""
import functools
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rubric import KIT  # noqa: E402
from submission import read_nofollow  # noqa: E402


def lex(src: str):
    """(code, strings): code with comments and the insides of string and character literals
    blanked (line numbers kept), and [(line, literal text)]. Line continuations are joined
    first, so a name cannot be hidden by splitting it over two lines."""
    src = re.sub(r"\\\r?\n", "", src)
    code, strings, i, n, line = [], [], 0, len(src), 1
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            code.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            chunk = src[i:j]
            code.append(re.sub(r"[^\n]", " ", chunk))
            line += chunk.count("\n")
            i = j
        elif c in "\"'":
            m = re.match(r'R"([^(\s]*)\((.*?)\)\1"', src[i - 1:], re.S) if c == '"' and i and src[i - 1] == "R" \
                else re.match(r"%s(\\.|[^%s\\\n])*%s?" % (c, c, c), src[i:], re.S)
            text = m.group(0)[1:] if c == '"' and i and src[i - 1] == "R" else m.group(0)
            strings.append((line, text))
            code.append(c + re.sub(r"[^\n]", " ", text[1:]))
            line += text.count("\n")
            i += len(text)
        else:
            code.append(c)
            line += c == "\n"
            i += 1
    return "".join(code), strings


def strip_comments(src: str) -> str:
    return lex(src)[0]


def token_regex(token: str) -> str:
    """A call 'name(' (any '::' qualification, not a member '.name(' or '->name('), a word, or text."""
    if token.endswith("("):
        return r"(?<![\w.>])(?:\w+\s*)?(?:::\s*)?" + re.escape(token[:-1]) + r"\s*\("
    if re.fullmatch(r"[\w:]+", token):
        return r"(?<![\w.>])" + re.escape(token) + r"(?!\w)"
    return re.escape(token)


def includes(text: str):
    """[(line, header)] of the #include lines (continuations joined, comments removed)."""
    code = strip_comments(text)
    out = []
    for n, line in enumerate(code.splitlines(), 1):
        m = re.match(r'\s*#\s*include\s*[<"]?\s*([^>"\s]*)', line)
        if m:
            # strip_comments blanks the insides of "...": take the name from the raw text's line
            raw = re.sub(r"\\\r?\n", "", text).splitlines()
            r = re.match(r'\s*#\s*include\s*[<"]([^>"]+)[>"]', raw[n - 1]) if n <= len(raw) else None
            out.append((n, r.group(1) if r else m.group(1)))
    return out


@functools.lru_cache(maxsize=None)
def test_headers():
    """Names of the files under the kit's tests/ (a student file that includes one reaches the
    test programs' own code)."""
    return frozenset(p.name for p in (KIT / "tests").rglob("*") if p.is_file())


def static_findings(found, rubric):
    """[(file, line, what, text)]: calls that have no business in a student file (rubric
    "static_checks"), in every student file; string literals are searched for the "strings" list."""
    checks, out = rubric.get("static_checks", {}), []
    for f in sorted(found):
        text = read_nofollow(found[f]).decode(errors="replace")
        code, strings = lex(text)
        code_lines = code.splitlines()
        for what, tokens in checks.get("code", {}).items():
            pats = [(t, re.compile(token_regex(t))) for t in tokens]
            for n, l in enumerate(code_lines, 1):
                hits = [t for t, rx in pats if rx.search(l)]
                if hits:
                    out.append((f, n, what, ", ".join(t.rstrip("(") for t in hits) + ": " + l.strip()[:120]))
        for n, header in includes(text):
            name = Path(header).name
            if name in test_headers() or re.search(r"gtest|gmock|(^|/)tests/", header):
                out.append((f, n, "includes test code", f"#include {header}: the test programs' own code (their "
                                                        "verdicts, their helpers) is not for student files"))
        for what, needles in checks.get("strings", {}).items():
            for n, lit in strings:
                hits = [x for x in needles if x in lit]
                if hits:
                    out.append((f, n, what, ", ".join(hits) + ": " + lit[:120]))
    return sorted(set(out), key=lambda x: (x[0], x[1], x[2]))


def check_restrictions(found, rubric):
    r = rubric.get("restrictions", {})
    allowed = set(r.get("allowed_includes", []))
    problems = []
    for f in r.get("files", []):
        if f not in found:
            continue
        text = read_nofollow(found[f]).decode(errors="replace")
        for n, line in enumerate(text.splitlines(), 1):
            m = re.match(r'\s*#\s*include\s*[<"]([^>"]+)[>"]', line)
            if m and m.group(1) not in allowed:
                problems.append(f"{f}:{n}: #include <{m.group(1)}> is outside the allowed set (the handout lists "
                                "it, under Problem 1; a finding costs no points by itself: your instructor reads it)")
        code = strip_comments(text)
        for call in r.get("forbidden_calls", []):
            pat = re.escape(call) + (r"\s*\(" if call[-1].isalnum() and "::" not in call else "")
            if re.search(r"(?<![\w:])" + pat, code):
                problems.append(f"{f}: uses {call} (Problem 1 may use only the kit's dist layer and launcher)")
    return problems


def static_item(found, rubric, number):
    """The 0-point item that shows what the static checks saw, and the files they flagged."""
    findings = static_findings(found, rubric)
    action = rubric.get("static_checks", {}).get("action", "flag")
    lines = [f"{f}:{n}: {what}: {text}" for f, n, what, text in findings]
    if findings:
        lines.append("\nThese calls have no business in a student file. " +
                     ("Items that use a flagged file score 0 (rubric static_checks.action = \"zero\")."
                      if action == "zero" else "They cost no points; the instructor reads this list."))
    return {"name": "Static checks: calls with no business in a student file (read by the instructor)",
            "number": str(number), "score": 0, "max_score": 0, "visibility": "visible",
            "status": "failed" if findings else "passed",
            "output": "\n".join(lines) or "nothing found: no process exit, process start, /proc, environment, "
                                          "argv or file access in any student file"}, \
        ({f for f, *_ in findings} if action == "zero" else set())
